package main

import (
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"time"
)

// The SPDX 2.3 JSON document, only the fields written here, in the order
// the specification lists them (encoding/json keeps struct order: the same
// input gives the same bytes).
type spdxDocument struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreationInfo   `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
	Comment  string   `json:"comment,omitempty"`
}

type spdxPackage struct {
	Name                  string            `json:"name"`
	SPDXID                string            `json:"SPDXID"`
	VersionInfo           string            `json:"versionInfo,omitempty"`
	PackageFileName       string            `json:"packageFileName,omitempty"`
	DownloadLocation      string            `json:"downloadLocation"`
	FilesAnalyzed         bool              `json:"filesAnalyzed"`
	Checksums             []spdxChecksum    `json:"checksums,omitempty"`
	LicenseConcluded      string            `json:"licenseConcluded"`
	LicenseDeclared       string            `json:"licenseDeclared"`
	CopyrightText         string            `json:"copyrightText"`
	Comment               string            `json:"comment,omitempty"`
	ExternalRefs          []spdxExternalRef `json:"externalRefs,omitempty"`
	PrimaryPackagePurpose string            `json:"primaryPackagePurpose,omitempty"`
}

type spdxChecksum struct {
	Algorithm string `json:"algorithm"`
	Value     string `json:"checksumValue"`
}

type spdxExternalRef struct {
	Category string `json:"referenceCategory"`
	Type     string `json:"referenceType"`
	Locator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

const noAssertion = "NOASSERTION"

// sbomCreator is the tool the SBOMs name as their creator: the name of the
// program that first wrote them (hack/image/release, now `image sbom`),
// kept because a new one would change the bytes of every SBOM, hence a
// release's SHA256SUMS, for the same commit.
const sbomCreator = "Tool: hotplugd-hack-image-release"

func runSBOM(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sbom", flag.ContinueOnError)
	binary := fs.String("binary", "", "the Go binary, e.g. dist/hotplugd-v0.1.0-linux-amd64 (required)")
	name := fs.String("name", "", "the binary's package name (default: the last element of its main package path)")
	version := fs.String("version", "", "the binary's version, e.g. v0.1.0 (required: a release build's main module says (devel))")
	createdFlag := fs.String("created", "", "the document's creation time, seconds since 1970: the commit's (required)")
	namespace := fs.String("namespace", "", "URI the documentNamespace starts with; /<file name>-<sha256> is added (required)")
	out := fs.String("out", "", "the SPDX JSON file to write (required)")
	if err := parseOnlyFlags(fs, args, stderr); err != nil {
		return err
	}
	if err := requireFlags(fs, "binary", "version", "out"); err != nil {
		return err
	}
	created, err := parseEpoch("created", *createdFlag)
	if err != nil {
		return fmt.Errorf("sbom: %w", err)
	}
	if u, err := url.Parse(*namespace); err != nil || !u.IsAbs() || u.Fragment != "" || u.RawQuery != "" {
		return fmt.Errorf("sbom: --namespace %q: want an absolute URI without query or fragment, e.g. https://github.com/hotplugd/hotplugd/releases/v0.1.0", *namespace)
	}
	bin, err := os.ReadFile(*binary)
	if err != nil {
		return fmt.Errorf("sbom: %w", err)
	}
	doc, err := sbom(bin, filepath.Base(*binary), *name, *version, *namespace, created)
	if err != nil {
		return fmt.Errorf("sbom: %s: %w", *binary, err)
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return fmt.Errorf("sbom: %w", err)
	}
	if err := writeFileAtomic(*out, 0o644, writeBytes(append(b, '\n'))); err != nil {
		return fmt.Errorf("sbom: write %s: %w", *out, err)
	}
	fmt.Fprintf(stderr, "image: wrote %s (%d packages)\n", *out, len(doc.Packages))
	return nil
}

// sbom is the SPDX document of the Go binary bin, whose file is named
// fileName.
func sbom(bin []byte, fileName, name, version, namespace string, created time.Time) (*spdxDocument, error) {
	info, err := buildinfo.Read(bytes.NewReader(bin))
	if err != nil {
		return nil, fmt.Errorf("no Go build information: %w", err)
	}
	if info.Main.Path == "" {
		return nil, errors.New("the build information names no main module (built by go run or from a file list?)")
	}
	if name == "" {
		name = path.Base(info.Path)
	}
	sum := sha256.Sum256(bin)
	binHex := hex.EncodeToString(sum[:])

	var settings []string
	for _, s := range info.Settings {
		settings = append(settings, s.Key+"="+s.Value)
	}
	mainID := "SPDXRef-Package-" + spdxIDPart(name)
	doc := &spdxDocument{
		SPDXVersion:       "SPDX-2.3",
		DataLicense:       "CC0-1.0",
		SPDXID:            "SPDXRef-DOCUMENT",
		Name:              fileName,
		DocumentNamespace: strings.TrimSuffix(namespace, "/") + "/" + fileName + "-" + binHex,
		CreationInfo: spdxCreationInfo{
			Created:  created.UTC().Format(time.RFC3339),
			Creators: []string{sbomCreator},
			Comment:  "Generated from the Go build information embedded in " + fileName + " (debug/buildinfo, as go version -m prints it). The creation time is the release commit's.",
		},
	}
	doc.Packages = append(doc.Packages, spdxPackage{
		Name:             name,
		SPDXID:           mainID,
		VersionInfo:      version,
		PackageFileName:  fileName,
		DownloadLocation: noAssertion,
		Checksums:        []spdxChecksum{{Algorithm: "SHA256", Value: binHex}},
		LicenseConcluded: noAssertion,
		LicenseDeclared:  noAssertion,
		CopyrightText:    noAssertion,
		Comment: fmt.Sprintf("The Go program %s of module %s, built by %s with %s.",
			info.Path, info.Main.Path, info.GoVersion, strings.Join(settings, " ")),
		ExternalRefs:          []spdxExternalRef{purlRef(info.Main.Path, version)},
		PrimaryPackagePurpose: "APPLICATION",
	})
	doc.Relationships = append(doc.Relationships, spdxRelationship{Element: "SPDXRef-DOCUMENT", Type: "DESCRIBES", Related: mainID})

	// The standard library: what vulnerability scanners match Go's own
	// advisories against (its version is the toolchain's).
	stdID := "SPDXRef-Package-go-stdlib"
	doc.Packages = append(doc.Packages, spdxPackage{
		Name:                  "stdlib",
		SPDXID:                stdID,
		VersionInfo:           info.GoVersion,
		DownloadLocation:      noAssertion,
		LicenseConcluded:      noAssertion,
		LicenseDeclared:       noAssertion,
		CopyrightText:         noAssertion,
		Comment:               "The Go standard library of the toolchain that built the binary.",
		ExternalRefs:          []spdxExternalRef{purlRef("stdlib", info.GoVersion)},
		PrimaryPackagePurpose: "LIBRARY",
	})
	doc.Relationships = append(doc.Relationships, spdxRelationship{Element: mainID, Type: "DEPENDS_ON", Related: stdID})

	deps := slices.Clone(info.Deps)
	slices.SortStableFunc(deps, func(a, b *debug.Module) int { return strings.Compare(a.Path, b.Path) })
	ids := map[string]bool{mainID: true, stdID: true}
	for _, d := range deps {
		m, comment := d, ""
		if d.Replace != nil {
			m = d.Replace
			comment = fmt.Sprintf("Replaces %s %s (a replace directive of the main module). ", d.Path, d.Version)
		}
		p := spdxPackage{
			Name:                  m.Path,
			VersionInfo:           m.Version,
			DownloadLocation:      noAssertion,
			LicenseConcluded:      noAssertion,
			LicenseDeclared:       noAssertion,
			CopyrightText:         noAssertion,
			PrimaryPackagePurpose: "LIBRARY",
		}
		if m.Version != "" {
			p.ExternalRefs = []spdxExternalRef{purlRef(m.Path, m.Version)}
		}
		if m.Sum != "" {
			h, err := h1SHA256(m.Sum)
			if err != nil {
				return nil, fmt.Errorf("module %s %s: %w", m.Path, m.Version, err)
			}
			p.Checksums = []spdxChecksum{{Algorithm: "SHA256", Value: h}}
			comment += "go.sum " + m.Sum + " (the checksum is its SHA-256 in hex: the module's dirhash, golang.org/x/mod/sumdb/dirhash Hash1)."
		} else {
			comment += "No go.sum hash: a module replaced by a directory."
		}
		p.Comment = comment
		id := "SPDXRef-Package-go-module-" + spdxIDPart(m.Path+"-"+m.Version)
		for n := 2; ids[id]; n++ {
			id = fmt.Sprintf("SPDXRef-Package-go-module-%s-%d", spdxIDPart(m.Path+"-"+m.Version), n)
		}
		ids[id] = true
		p.SPDXID = id
		doc.Packages = append(doc.Packages, p)
		doc.Relationships = append(doc.Relationships, spdxRelationship{Element: mainID, Type: "DEPENDS_ON", Related: id})
	}
	return doc, nil
}

// spdxIDPart keeps what an SPDX identifier may hold (letters, digits, "."
// and "-") and makes every other character a "-".
func spdxIDPart(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' {
			return r
		}
		return '-'
	}, s)
}

// h1SHA256 is the hex of a go.sum "h1:" hash (base64 of a SHA-256).
func h1SHA256(sum string) (string, error) {
	b64, ok := strings.CutPrefix(sum, "h1:")
	if !ok {
		return "", fmt.Errorf("go.sum hash %q does not start with h1", sum)
	}
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(b) != sha256.Size {
		return "", fmt.Errorf("go.sum hash %q is not the base64 of a SHA-256", sum)
	}
	return hex.EncodeToString(b), nil
}

// purlRef is the package URL of a Go module (or of stdlib):
// pkg:golang/<path>@<version>, each path element and the version
// percent-encoded as the purl specification asks.
func purlRef(modPath, version string) spdxExternalRef {
	elems := strings.Split(modPath, "/")
	for i, e := range elems {
		elems[i] = purlEscape(e)
	}
	loc := "pkg:golang/" + strings.Join(elems, "/")
	if version != "" {
		loc += "@" + purlEscape(version)
	}
	return spdxExternalRef{Category: "PACKAGE-MANAGER", Type: "purl", Locator: loc}
}

func purlEscape(s string) string {
	s = url.PathEscape(s)
	for _, r := range []struct{ from, to string }{{"+", "%2B"}, {":", "%3A"}, {"@", "%40"}} {
		s = strings.ReplaceAll(s, r.from, r.to)
	}
	return s
}
