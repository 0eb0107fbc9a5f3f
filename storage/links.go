package storage

import (
	"fmt"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/kdefer/kdefer/stagecontract"
)

// maxLinkHops is how many symbolic links one resolution follows, as
// Linux's own lookup does (ELOOP past 40).
const maxLinkHops = 40

// maxLinkTarget is the longest symbolic link text recorded (PATH_MAX less
// its NUL).
const maxLinkTarget = 4095

// ErrLinkOut is the error of a symbolic link that leads out of the tree it
// is in: its text is absolute, or goes up past the tree's root, or it goes
// round in a loop.
var ErrLinkOut = fmt.Errorf("leads out of the directory")

// SymlinkInside checks that the symbolic link at name (slash-separated,
// relative to a tree's root) whose text is target resolves inside the tree,
// following the tree's other symbolic links as the kernel would: link
// returns the text of the symbolic link at a path of the tree, if there is
// one (nil: none is). Only the names resolved are looked at, not the tree
// on disk: this is the check of a list of links (a manifest), each against
// the others.
func SymlinkInside(name, target string, link func(string) (string, bool)) error {
	if target == "" || len(target) > maxLinkTarget || strings.IndexByte(target, 0) >= 0 || !utf8.ValidString(target) {
		return fmt.Errorf("symbolic link %q: target %q is empty, longer than %d bytes, or not valid UTF-8", name, target, maxLinkTarget)
	}
	out := fmt.Errorf("symbolic link %q (to %q) %w", name, target, ErrLinkOut)
	if path.IsAbs(target) {
		return out
	}
	var stack []string // the resolved components, from the root
	if d := path.Dir(name); d != "." {
		stack = strings.Split(d, "/")
	}
	queue := strings.Split(target, "/")
	for hops := 0; len(queue) > 0; {
		c := queue[0]
		queue = queue[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(stack) == 0 {
				return out
			}
			stack = stack[:len(stack)-1]
			continue
		}
		stack = append(stack, c)
		if link == nil {
			continue
		}
		t, ok := link(strings.Join(stack, "/"))
		if !ok {
			continue
		}
		if hops++; hops > maxLinkHops || t == "" || path.IsAbs(t) {
			return out
		}
		stack = stack[:len(stack)-1]
		queue = append(strings.Split(t, "/"), queue...)
	}
	return nil
}

// LinkPath is how a manifest records the name of a link (ManifestLink.Path):
// as a file's key is, the name itself or its encoding (EncodeName).
func LinkPath(name string) (string, error) {
	p, _, err := EncodeName(name)
	return p, err
}

// LinkName returns the name a manifest link's Path records (LinkPath), or
// why it records none that stays inside the tree.
func LinkName(p string) (string, error) {
	if strings.HasPrefix(p, EncodedDir) {
		return DecodeName(p)
	}
	if err := CheckRel(p); err != nil {
		return "", err
	}
	return p, nil
}

// checkLinks checks a manifest's links against its files (keys, the file
// keys it lists): each names a path inside the tree once, that no file has;
// a hard link's target is a file of the manifest; a symbolic link's text
// resolves inside the tree through the manifest's other symbolic links
// (SymlinkInside). Stage-in restores nothing of a manifest that fails.
func checkLinks(links []stagecontract.ManifestLink, keys map[string]struct{}) error {
	names := make(map[string]string, len(links)) // name: symbolic text, or "" for a hard link
	for i, l := range links {
		name, err := LinkName(l.Path)
		if err != nil {
			return fmt.Errorf("manifest link %d: %w", i, err)
		}
		if _, dup := names[name]; dup {
			return fmt.Errorf("manifest link %d: path %q is listed twice", i, l.Path)
		}
		if _, dup := keys[l.Path]; dup {
			return fmt.Errorf("manifest link %d: path %q is also a file", i, l.Path)
		}
		switch l.Kind {
		case stagecontract.LinkHard:
			if _, ok := keys[l.Target]; !ok {
				return fmt.Errorf("manifest link %d (%q): hard link target %q is not a file of the manifest", i, l.Path, l.Target)
			}
			names[name] = ""
		case stagecontract.LinkSymbolic:
			names[name] = l.Target
		default:
			return fmt.Errorf("manifest link %d (%q): kind %q is not %s or %s", i, l.Path, l.Kind, stagecontract.LinkHard, stagecontract.LinkSymbolic)
		}
	}
	symlink := func(n string) (string, bool) {
		t, ok := names[n]
		return t, ok && t != ""
	}
	for i, l := range links {
		if l.Kind != stagecontract.LinkSymbolic {
			continue
		}
		name, _ := LinkName(l.Path)
		if err := SymlinkInside(name, l.Target, symlink); err != nil {
			return fmt.Errorf("manifest link %d: %w", i, err)
		}
	}
	return nil
}

// LinkNameOf returns the local relative path of a link of a manifest that
// ParseManifest accepted.
func LinkNameOf(l stagecontract.ManifestLink) string {
	name, _ := LinkName(l.Path) // checked by ParseManifest
	return name
}
