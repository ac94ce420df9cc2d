// Package checksum is the kubelet's checkpoint checksum, shared by
// pkg/cpumgr and pkg/memmgr: its type, under the kubelet's own package and
// type name (k8s.io/kubernetes/pkg/kubelet/checkpointmanager/checksum), and
// its hash.
//
// The kubelet hashes a spew dump of its checkpoint struct (k8s.io/utils/dump
// ForHash), and that dump prints every field's type by package and type
// name: the checksum field prints as "(checksum.Checksum)0", so the package
// name and the type name are part of the hashed text. This package exists
// for that name, and holds the hash beside it.
package checksum

import "hash/fnv"

// Checksum is a checkpoint's "checksum" (or "dataChecksum") field: an
// FNV-32a value stored in 64 bits, as a JSON number, as the kubelet stores
// it.
type Checksum uint64

// Of is the kubelet's checksum of a dump (checksum.New): FNV-32a of its
// text.
func Of(dump string) uint64 {
	h := fnv.New32a()
	h.Write([]byte(dump))
	return uint64(h.Sum32())
}
