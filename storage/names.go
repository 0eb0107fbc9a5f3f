package storage

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/kdefer/kdefer/stagecontract"
)

// EncodedDir is where, under a stage-out prefix, a file is stored whose name
// the store cannot hold as a key (CheckRel refuses it: invalid UTF-8,
// control characters such as a newline, a backslash, or a path in kdefer's
// own reserved directory). Its key is EncodedDir followed by the name with
// every such byte, and "%" itself, written as "%XX" (two uppercase hex
// digits); "/" stays, so the tree stays visible in a listing.
//
// The scheme is reversible (DecodeName) and cannot collide with a real name:
// real names never become keys under the reserved directory, and percent
// encoding with "%" escaped is one-to-one. The manifest entry's Path carries
// the original name for people and tools (stagecontract.ManifestFile.Path).
const EncodedDir = stagecontract.ReservedDir + "names/"

// EncodeName returns the key, relative to the prefix, that name is stored
// under: name itself when CheckRel accepts it, else its encoded key, which
// then is reported as encoded. Names CheckName refuses cannot be stored.
func EncodeName(name string) (key string, encoded bool, err error) {
	if CheckRel(name) == nil {
		return name, false, nil
	}
	if err := CheckName(name); err != nil {
		return "", false, err
	}
	var b strings.Builder
	b.WriteString(EncodedDir)
	for i := 0; i < len(name); {
		r, n := utf8.DecodeRuneInString(name[i:])
		if (r == utf8.RuneError && n == 1) || r < 0x20 || r == 0x7f || r == '\\' || r == '%' {
			fmt.Fprintf(&b, "%%%02X", name[i])
			i++
			continue
		}
		b.WriteString(name[i : i+n])
		i += n
	}
	return b.String(), true, nil
}

// DecodeName returns the name an encoded key (relative to the prefix, under
// EncodedDir) was made from. It refuses a key EncodeName cannot have
// written: one that is not under EncodedDir, is not itself a valid key, or
// holds a malformed or needless escape (so each name has one key only).
func DecodeName(key string) (string, error) {
	enc, ok := strings.CutPrefix(key, EncodedDir)
	if !ok || enc == "" {
		return "", fmt.Errorf("key %q is not under %s", key, EncodedDir)
	}
	var b strings.Builder
	for i := 0; i < len(enc); i++ {
		if enc[i] != '%' {
			b.WriteByte(enc[i])
			continue
		}
		if i+2 >= len(enc) || strings.ToUpper(enc[i+1:i+3]) != enc[i+1:i+3] {
			return "", fmt.Errorf("key %q has a malformed escape", key)
		}
		v, err := strconv.ParseUint(enc[i+1:i+3], 16, 8)
		if err != nil {
			return "", fmt.Errorf("key %q has a malformed escape", key)
		}
		b.WriteByte(byte(v))
		i += 2
	}
	name := b.String()
	if again, encoded, err := EncodeName(name); err != nil || !encoded || again != key {
		return "", fmt.Errorf("key %q is not the encoding of a name the store cannot hold", key)
	}
	return name, nil
}

// ManifestPath is name as a manifest records it in Path fields: quoted with
// strconv.Quote when it is not valid UTF-8, which JSON cannot carry.
func ManifestPath(name string) string {
	if utf8.ValidString(name) {
		return name
	}
	return strconv.Quote(name)
}
