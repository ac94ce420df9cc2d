package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// pushOptions are the push command's flags and argument.
type pushOptions struct {
	archive  string
	insecure bool
	target   string // REPO[:TAG]
}

func (o *pushOptions) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.archive, "archive", "", "OCI archive written by `image build` (required)")
	fs.BoolVar(&o.insecure, "insecure", false, "plain HTTP to the registry (localhost and 127.0.0.1 always are)")
}

// destination is where a push goes: the repository as the user wrote it
// (for the printed REPO@digest) and the reference to write to.
type destination struct {
	repo string
	ref  name.Reference // a tag, or nil: push by digest only
	opts []name.Option
}

func (o *pushOptions) validate() (destination, error) {
	var d destination
	if o.archive == "" {
		return d, errors.New("push: no --archive given: pass the OCI archive, e.g. --archive bin/image/hotplugd.oci.tar")
	}
	if o.target == "" {
		return d, errors.New("push: no destination given: pass REPO[:TAG], e.g. registry.example.com/ops/hotplugd:v0.1.0")
	}
	d.opts = []name.Option{name.StrictValidation}
	if o.insecure {
		d.opts = append(d.opts, name.Insecure)
	}
	if strings.Contains(o.target, "@") {
		return d, fmt.Errorf("push: %q: give REPO[:TAG]; the digest is the archive's", o.target)
	}
	// REPO alone pushes by digest only; REPO:TAG also tags.
	if _, err := name.NewRepository(o.target, d.opts...); err == nil {
		d.repo = o.target
		return d, nil
	}
	t, err := name.NewTag(o.target, d.opts...)
	if err != nil {
		return d, fmt.Errorf("push: %q: want REPO[:TAG]: %w", o.target, err)
	}
	d.repo = strings.TrimSuffix(o.target, ":"+t.TagStr())
	d.ref = t
	return d, nil
}

func runPush(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o pushOptions
	fs := flag.NewFlagSet("push", flag.ContinueOnError)
	o.addFlags(fs)
	pos, err := parseFlags(fs, args, stderr)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return fmt.Errorf("push: want one REPO[:TAG], got %q", pos)
	}
	if len(pos) == 1 {
		o.target = pos[0]
	}
	dst, err := o.validate()
	if err != nil {
		return err
	}
	ref, err := push(ctx, o.archive, dst, remote.WithAuthFromKeychain(authn.DefaultKeychain))
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "image: pushed %s to %s\n", o.archive, o.target)
	fmt.Fprintln(stdout, ref)
	return nil
}

// push writes the archive's index and every image under it to dst and
// returns REPO@sha256:....
func push(ctx context.Context, archive string, dst destination, opts ...remote.Option) (string, error) {
	idx, _, cleanup, err := openArchive(archive)
	if err != nil {
		return "", fmt.Errorf("push: %w", err)
	}
	defer cleanup()
	d, err := idx.Digest()
	if err != nil {
		return "", fmt.Errorf("push: %w", err)
	}
	ref := dst.ref
	if ref == nil {
		if ref, err = name.NewDigest(dst.repo+"@"+d.String(), dst.opts...); err != nil {
			return "", fmt.Errorf("push: %w", err)
		}
	}
	opts = append(opts, remote.WithContext(ctx))
	if err := remote.WriteIndex(ref, idx, opts...); err != nil {
		return "", fmt.Errorf("push: %s: %w", ref, err)
	}
	return dst.repo + "@" + d.String(), nil
}
