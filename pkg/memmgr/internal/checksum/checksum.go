// Package checksum holds the type of the kubelet's checkpoint checksum field.
//
// It exists only for its name: the kubelet hashes a spew dump of the
// checkpoint struct, which prints every field's type by package and type
// name, so the checksum field must print as "(checksum.Checksum)0" exactly
// as the kubelet's pkg/kubelet/checkpointmanager/checksum.Checksum does.
package checksum

// Checksum is a checkpoint's checksum: an FNV-32a value stored in 64 bits,
// as the kubelet stores it.
type Checksum uint64
