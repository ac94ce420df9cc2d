// Package checksum declares the type of the kubelet's checkpoint checksum
// field under the kubelet's own package and type name
// (k8s.io/kubernetes/pkg/kubelet/checkpointmanager/checksum.Checksum).
//
// The kubelet hashes a spew dump of its checkpoint struct, and that dump
// prints the field as "(checksum.Checksum)0": the package name and the type
// name are part of the hashed text. This package exists only so that
// hotplugd's dump prints the same words.
package checksum

// Checksum is the checkpoint's "checksum" field: FNV-32a of the dump of the
// checkpoint with the field set to 0, stored as a JSON number.
type Checksum uint64
