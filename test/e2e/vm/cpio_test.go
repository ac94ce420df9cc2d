//go:build e2e

package vm

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"strings"
	"testing"
)

// cpioFile is one member of an initramfs.
type cpioFile struct {
	Name         string // without a leading slash, e.g. "dev/console"
	Mode         uint32 // type and permission bits, e.g. cpioDir|0o755
	Major, Minor uint32 // of a device node
	Data         []byte // of a regular file
}

// File type bits of a cpio member's mode (as in stat's st_mode).
const (
	cpioDir  = 0o040000
	cpioReg  = 0o100000
	cpioChar = 0o020000
)

// writeInitramfs writes files as a gzip-compressed newc ("070701") cpio
// archive, the format the kernel unpacks into its initial root file system
// (Documentation/driver-api/early-userspace/buffer-format.rst). It is
// reproducible: inode numbers count up from 1, mtimes, owners and the gzip
// header's name and time are zero. A directory must come before its
// members.
func writeInitramfs(w io.Writer, files []cpioFile) error {
	zw, err := gzip.NewWriterLevel(w, gzip.BestSpeed)
	if err != nil {
		return err
	}
	if err := writeCPIO(zw, files); err != nil {
		return err
	}
	return zw.Close()
}

// writeCPIO writes the uncompressed archive, with its trailer.
func writeCPIO(w io.Writer, files []cpioFile) error {
	var off int64
	put := func(b []byte) error {
		n, err := w.Write(b)
		off += int64(n)
		return err
	}
	pad := func() error {
		return put(make([]byte, (4-off%4)%4))
	}
	member := func(ino int, f cpioFile) error {
		if strings.HasPrefix(f.Name, "/") {
			return fmt.Errorf("cpio: %s: names are relative", f.Name)
		}
		if f.Mode&cpioReg == 0 && len(f.Data) > 0 {
			return fmt.Errorf("cpio: %s: only regular files have data", f.Name)
		}
		nlink := 1
		if f.Mode&0o170000 == cpioDir {
			nlink = 2
		}
		// magic, ino, mode, uid, gid, nlink, mtime, filesize, devmajor,
		// devminor, rdevmajor, rdevminor, namesize (with its NUL), check
		hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
			ino, f.Mode, 0, 0, nlink, 0, len(f.Data), 0, 0, f.Major, f.Minor, len(f.Name)+1, 0)
		if err := put([]byte(hdr)); err != nil {
			return err
		}
		if err := put(append([]byte(f.Name), 0)); err != nil {
			return err
		}
		if err := pad(); err != nil {
			return err
		}
		if err := put(f.Data); err != nil {
			return err
		}
		return pad()
	}
	for i, f := range files {
		if err := member(i+1, f); err != nil {
			return err
		}
	}
	return member(0, cpioFile{Name: "TRAILER!!!"})
}

// TestCPIO pins the archive's bytes: the newc header layout the kernel
// parses, and the 4-byte alignment of names and data.
func TestCPIO(t *testing.T) {
	var b bytes.Buffer
	err := writeCPIO(&b, []cpioFile{
		{Name: "dev", Mode: cpioDir | 0o755},
		{Name: "dev/console", Mode: cpioChar | 0o600, Major: 5, Minor: 1},
		{Name: "init", Mode: cpioReg | 0o755, Data: []byte("#!")},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "" +
		"070701" + "00000001" + "000041ED" + "00000000" + "00000000" + "00000002" + "00000000" + "00000000" +
		"00000000" + "00000000" + "00000000" + "00000000" + "00000004" + "00000000" + "dev\x00" + "\x00\x00" +
		"070701" + "00000002" + "00002180" + "00000000" + "00000000" + "00000001" + "00000000" + "00000000" +
		"00000000" + "00000000" + "00000005" + "00000001" + "0000000C" + "00000000" + "dev/console\x00" + "\x00\x00" +
		"070701" + "00000003" + "000081ED" + "00000000" + "00000000" + "00000001" + "00000000" + "00000002" +
		"00000000" + "00000000" + "00000000" + "00000000" + "00000005" + "00000000" + "init\x00" + "\x00" + "#!" + "\x00\x00" +
		"070701" + "00000000" + "00000000" + "00000000" + "00000000" + "00000001" + "00000000" + "00000000" +
		"00000000" + "00000000" + "00000000" + "00000000" + "0000000B" + "00000000" + "TRAILER!!!\x00" + "\x00\x00\x00"
	if got := b.String(); got != want {
		t.Errorf("archive:\n%q\nwant:\n%q", got, want)
	}
	if b.Len()%4 != 0 {
		t.Errorf("archive length %d is not a multiple of 4", b.Len())
	}

	// Reproducible through gzip too.
	var z1, z2 bytes.Buffer
	files := []cpioFile{{Name: "init", Mode: cpioReg | 0o755, Data: bytes.Repeat([]byte("x"), 1000)}}
	if err := writeInitramfs(&z1, files); err != nil {
		t.Fatal(err)
	}
	if err := writeInitramfs(&z2, files); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(z1.Bytes(), z2.Bytes()) {
		t.Error("two archives of the same files differ")
	}
}
