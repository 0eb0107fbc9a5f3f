package nodelogs

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestCRIReader(t *testing.T) {
	const ts = "2026-12-04T14:00:00.123456789Z"
	long := strings.Repeat("0123456789abcdef", 5<<10) // 80 KiB, over the buffer
	for _, tc := range []struct {
		name, in, want string
	}{
		{"empty", "", ""},
		{"full line", ts + " stdout F hello world\n", "hello world\n"},
		{"partial then full", ts + " stdout P hello \n" + ts + " stdout F world\n", "hello world\n"},
		{"streams interleaved", ts + " stdout F out\n" + ts + " stderr F err\n" + ts + " stdout F out again\n", "out\nerr\nout again\n"},
		{"empty full line", ts + " stdout F \n", "\n"},
		{"empty partial line", ts + " stdout P \n" + ts + " stdout F x\n", "x\n"},
		{"content with spaces", ts + " stdout F  a  b \n", " a  b \n"},
		{"future tags", ts + " stdout F:x y\n" + ts + " stdout P:z part\n", "y\npart"},
		{"final partial line", ts + " stdout F a\n" + ts + " stdout P no newline\n", "a\nno newline"},
		{"last line cut before its newline", ts + " stdout F a\n" + ts + " stdout F cut", "a\ncut\n"},
		{"malformed line kept", "garbage\n" + ts + " stdout F ok\n", "garbage\nok\n"},
		{"two spaces are malformed", ts + " stdout F\n", ts + " stdout F\n"},
		{"bare newline", "\n", "\n"},
		{"malformed last line without newline", "a b", "a b\n"},
		{"long full line", ts + " stdout F " + long + "\n" + ts + " stderr F next\n", long + "\nnext\n"},
		{"long partial line", ts + " stdout P " + long + "\n" + ts + " stdout F end\n", long + "end\n"},
		{"long line at the end without newline", ts + " stdout F " + long, long + "\n"},
		{"long malformed line", long + "\n" + ts + " stdout F next\n", long + "\nnext\n"},
		{"long line ending at the buffer's end", ts + " stdout F " + long[:criBufSize-len(ts)-10] + "\n", long[:criBufSize-len(ts)-10] + "\n"},
		{"line cut at the buffer's end", ts + " stdout F " + long[:criBufSize-len(ts)-10], long[:criBufSize-len(ts)-10] + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := io.ReadAll(NewCRIReader(strings.NewReader(tc.in)))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("%s", diffAt(string(got), tc.want))
			}
			// Small reads on both sides: the state between pieces holds.
			got, err = io.ReadAll(iotest.OneByteReader(NewCRIReader(iotest.HalfReader(strings.NewReader(tc.in)))))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("byte by byte: %s", diffAt(string(got), tc.want))
			}
			if err := iotest.TestReader(NewCRIReader(strings.NewReader(tc.in)), []byte(tc.want)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A read error of the file comes after what was decoded before it.
func TestCRIReaderError(t *testing.T) {
	in := io.MultiReader(strings.NewReader("2026-12-04T14:00:00Z stdout F a\n"), iotest.ErrReader(io.ErrUnexpectedEOF))
	got, err := io.ReadAll(NewCRIReader(in))
	if err != io.ErrUnexpectedEOF || !bytes.Equal(got, []byte("a\n")) {
		t.Fatalf("got %q, %v; want %q, %v", got, err, "a\n", io.ErrUnexpectedEOF)
	}
}

// diffAt describes where got first differs from want: logs are long.
func diffAt(got, want string) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	clip := func(s string) string { return s[min(i, len(s)):min(i+60, len(s))] }
	return fmt.Sprintf("got %d bytes, want %d; first difference at byte %d: got %q, want %q", len(got), len(want), i, clip(got), clip(want))
}
