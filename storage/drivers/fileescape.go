// Copyright 2019 The Go Cloud Development Kit Authors
// Copyright 2026 The kdefer Authors
//
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
//     https://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.

package drivers

// The key <-> file name mapping of gocloud.dev/blob/fileblob (v0.49.0),
// copied from its internal/escape package and fileblob.escapeKey, which Go
// does not let kdefer import: kdefer reads file:// directories itself
// (fileroot.go) and must find the files fileblob wrote under the names it
// wrote them. Keep in step with gocloud when go.mod moves it.

import (
	"fmt"
	"strconv"
)

// fileEscapeKey is fileblob's escapeKey on a '/'-separated system.
func fileEscapeKey(s string) string {
	return hexEscape(s, func(r []rune, i int) bool {
		c := r[i]
		switch {
		case c < 32:
			return true
		case i > 1 && c == '/' && r[i-1] == '.' && r[i-2] == '.': // "../"
			return true
		case i > 0 && c == '/' && r[i-1] == '/': // "//"
			return true
		case c == '/' && i == len(r)-1: // trailing slash
			return true
		}
		return false
	})
}

// fileUnescapeKey reverses fileEscapeKey.
func fileUnescapeKey(s string) string { return hexUnescape(s) }

// hexEscape returns s, with all runes for which shouldEscape returns true
// escaped to "__0xXXX__", where XXX is the hex representation of the rune
// value. Non-UTF-8 runes become U+FFFD (as in fileblob).
func hexEscape(s string, shouldEscape func(s []rune, i int) bool) string {
	// Do a first pass to see which runes (if any) need escaping.
	runes := []rune(s)
	escapeAt := make([]bool, len(runes))
	var pending []int
	n := 0
	for i := range runes {
		// In addition to whatever the caller wants escaped, always escape
		// the start of any substring that HexUnescape would itself parse as
		// an escape sequence (i.e., that looks like "__0x<hex>__"). Without
		// this, a string need not contain any character the caller wants
		// escaped to still produce output identical to some other,
		// different string that does: e.g., a literal "__0x2f__" in the
		// input is indistinguishable, after escaping, from a "/" that some
		// other input had escaped into that same text. Two different
		// preimages mapping to the same escaped string is a real
		// correctness and security problem for callers that use the
		// escaped string as a storage key or path, since it lets one
		// caller-chosen key collide with another's.
		if shouldEscape(runes, i) || isEscapeSequence(runes, i) {
			escapeAt[i] = true
			pending = append(pending, i)
			n++
		}
	}
	// Escaping a rune emits "__0x<hex>__", which starts with "__". If the
	// input right before an escaped rune ends with "__0x<hex>" or
	// "__0x<hex>_" (not an escape sequence on its own, since the input does
	// not continue with "__"), the emitted "__" completes it into one, and
	// HexUnescape parses the output as a different string: "__0x2f/" would
	// escape to "__0x2f__0x2f__", which is also what "/0x2f__" escapes to.
	// Escape the leading "_" of any such dangling prefix. That emits another
	// "__", so check the newly escaped position the same way.
	for len(pending) > 0 {
		i := pending[len(pending)-1]
		pending = pending[:len(pending)-1]
		if j, ok := danglingEscapePrefix(runes, i); ok && !escapeAt[j] {
			escapeAt[j] = true
			pending = append(pending, j)
			n++
		}
	}
	if n == 0 {
		return s
	}
	// Each escaped rune turns into at most 14 runes ("__0x7fffffff__"),
	// so allocate an extra 13 for each. We'll reslice at the end
	// if we didn't end up using them.
	escaped := make([]rune, len(runes)+13*n)
	j := 0 // current index into escaped
	for i, r := range runes {
		if escapeAt[i] {
			// We were asked to escape this rune.
			for _, x := range fmt.Sprintf("__%#x__", r) {
				escaped[j] = x
				j++
			}
		} else {
			escaped[j] = r
			j++
		}
	}
	return string(escaped[0:j])
}

// danglingEscapePrefix reports whether r[:end] ends with "__0x<hex>" or
// "__0x<hex>_": the start of an escape sequence that only lacks the
// trailing "__" (or its second "_"). When the rune at r[end] is escaped,
// the "__" that begins its escape sequence supplies what is missing, so
// hexUnescape would read the output as an escape sequence that was never
// in the input. It returns the index of the leading "_" of that prefix.
func danglingEscapePrefix(r []rune, end int) (int, bool) {
	// The input may already supply the first "_" of the trailing "__".
	if end > 0 && r[end-1] == '_' {
		end--
	}
	// HexUnescape reads hex digits up to the next "_", so walk back over
	// the run of non-"_" runes: it must be "0x<hex>", preceded by "__".
	start := end
	for start > 0 && r[start-1] != '_' {
		start--
	}
	if start < 2 || end-start < 2 || r[start] != '0' || r[start+1] != 'x' || r[start-2] != '_' {
		return 0, false
	}
	if _, err := strconv.ParseInt(string(r[start+2:end]), 16, 32); err != nil {
		return 0, false
	}
	return start - 2, true
}

// isEscapeSequence reports whether the rune sequence starting at r[i] would
// be parsed by HexUnescape as an escape sequence, regardless of whether it
// was actually produced by a previous call to HexEscape.
func isEscapeSequence(r []rune, i int) bool {
	ok, _, _ := unescape(r, i)
	return ok
}

// unescape tries to unescape starting at r[i].
// It returns a boolean indicating whether the unescaping was successful,
// and (if true) the unescaped rune and the last index of r that was used
// during unescaping.
func unescape(r []rune, i int) (bool, rune, int) {
	// Look for "__0x".
	if r[i] != '_' {
		return false, 0, 0
	}
	i++
	if i >= len(r) || r[i] != '_' {
		return false, 0, 0
	}
	i++
	if i >= len(r) || r[i] != '0' {
		return false, 0, 0
	}
	i++
	if i >= len(r) || r[i] != 'x' {
		return false, 0, 0
	}
	i++
	// Capture the digits until the next "_" (if any).
	var hexdigits []rune
	for ; i < len(r) && r[i] != '_'; i++ {
		hexdigits = append(hexdigits, r[i])
	}
	// Look for the trailing "__".
	if i >= len(r) || r[i] != '_' {
		return false, 0, 0
	}
	i++
	if i >= len(r) || r[i] != '_' {
		return false, 0, 0
	}
	// Parse the hex digits into an int32.
	retval, err := strconv.ParseInt(string(hexdigits), 16, 32)
	if err != nil {
		return false, 0, 0
	}
	return true, rune(retval), i
}

// hexUnescape reverses HexEscape.
func hexUnescape(s string) string {
	var unescaped []rune
	runes := []rune(s)
	for i := 0; i < len(runes); i++ {
		if ok, newR, newI := unescape(runes, i); ok {
			// We unescaped some runes starting at i, resulting in the
			// unescaped rune newR. The last rune used was newI.
			if unescaped == nil {
				// This is the first rune we've encountered that
				// needed unescaping. Allocate a buffer and copy any
				// previous runes.
				unescaped = make([]rune, i)
				copy(unescaped, runes)
			}
			unescaped = append(unescaped, newR)
			i = newI
		} else if unescaped != nil {
			unescaped = append(unescaped, runes[i])
		}
	}
	if unescaped == nil {
		return s
	}
	return string(unescaped)
}
