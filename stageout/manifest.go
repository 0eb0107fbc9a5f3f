package stageout

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/storage"
)

// stored counts f as done and adds its manifest entry.
func (e *engine) stored(f *file, skipped bool) {
	if skipped {
		e.prog.Skipped.Add(1)
		e.prog.BytesDone.Add(f.size)
	} else {
		e.prog.Objects.Add(1)
	}
	e.prog.FilesDone.Add(1)
	mf := stagecontract.ManifestFile{Key: f.key[len(e.prefix):], Size: f.size, Checksum: storage.FormatChecksum(f.crc), Checksums: f.sums.Extra(), ModTime: f.mtime.UTC()}
	if f.encoded {
		mf.Path = storage.ManifestPath(f.rel)
	}
	rec, err := json.Marshal(mf)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.storedTarget(f.rel)
	if err == nil {
		err = e.results.add(rec)
	}
	if err != nil && e.resultsErr == nil {
		e.resultsErr = err
	}
	e.totalBytes += f.size
}

// beforeWrite removes an earlier run's manifest before this run changes any
// object it lists: a manifest must only ever describe objects as they are.
// Before its first write it also stores the uncommitted marker
// (stagecontract.UncommittedKey), so a prefix this run leaves without a
// manifest says so to a stage-in.
func (e *engine) beforeWrite(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.wrote {
		return nil
	}
	if e.manifestKey == "" {
		// An engine that commits nothing (the steps' logs, archived after
		// the stage-out's manifest) marks nothing either.
		e.wrote = true
		return nil
	}
	if e.hasManifest {
		err := e.o.Retry.Do(ctx, func(ctx context.Context) error { return e.be.Delete(ctx, e.manifestKey) })
		if err != nil {
			return storage.WithOp("remove outdated manifest", err)
		}
		e.hasManifest = false
	}
	marker := []byte(`{"tool":"kdefer-stage","version":"` + e.o.Version + `"}` + "\n")
	err := e.o.Retry.Do(ctx, func(ctx context.Context) error {
		_, err := e.be.Put(ctx, e.prefix+stagecontract.UncommittedKey, bytes.NewReader(marker), int64(len(marker)), storage.PutOptions{ContentType: "application/json"})
		return err
	})
	if err != nil {
		return storage.WithOp("write the uncommitted marker", err)
	}
	e.wrote = true
	return nil
}

// committed removes the uncommitted marker once the manifest is written,
// whether this run wrote it or an earlier attempt did (one that stored
// every file and was stopped before its manifest leaves a rerun nothing to
// write). The manifest decides already (a prefix with one is committed,
// marker or not), so a store that refuses the delete costs a log line only.
func (e *engine) committed(ctx context.Context) {
	err := e.o.Retry.Do(ctx, func(ctx context.Context) error { return e.be.Delete(ctx, e.prefix+stagecontract.UncommittedKey) })
	if err != nil { // a missing key is not an error (storage.Backend)
		e.o.Log.Warn().Err(err).Str("key", e.prefix+stagecontract.UncommittedKey).Msg("leave the uncommitted marker: the manifest commits the prefix")
	}
}

// writeManifest stores m with the spilled entries as its files. m.Files is
// left empty: the entries go from the temporary file to the store.
func (e *engine) writeManifest(ctx context.Context, m *stagecontract.Manifest) error {
	if e.resultsErr != nil {
		return e.resultsErr
	}
	links, err := e.keptLinks()
	if err != nil {
		return err
	}
	defer links.close()
	m.Unsaved = e.unsavedFiles // keptLinks may have added some
	slices.SortFunc(m.Unsaved, func(a, b stagecontract.UnsavedFile) int { return strings.Compare(a.Path, b.Path) })
	if !e.wrote && e.hasManifest {
		// Nothing changed this run: keep the earlier manifest if it lists
		// exactly these files, and rewrite nothing. (This reads both lists
		// into memory; a rerun that changed nothing is the only such case.)
		old, err := storage.ReadManifest(ctx, e.be, e.manifestKey, e.o.Retry)
		if err == nil {
			files, err := e.entries()
			var ls []stagecontract.ManifestLink
			if err == nil {
				ls, err = linkEntries(links)
			}
			if err == nil && storage.SameFiles(old.Files, files) && slices.Equal(old.Unsaved, m.Unsaved) && slices.Equal(old.Links, ls) {
				*m = *old
				return nil
			}
		}
	}
	m.End = e.o.Clock.Now().UTC()
	body, size, err := e.manifestBody(m, links)
	if err != nil {
		return err
	}
	if f, ok := body.(*os.File); ok {
		defer f.Close()
	}
	err = e.o.Retry.Do(ctx, func(ctx context.Context) error {
		_, err := e.be.Put(ctx, e.manifestKey, body, size, storage.PutOptions{ContentType: "application/json"})
		return err
	})
	return storage.WithOp("write manifest", err)
}

// entries reads the spilled manifest entries back.
func (e *engine) entries() ([]stagecontract.ManifestFile, error) {
	var files []stagecontract.ManifestFile
	err := e.results.each(func(rec []byte) error {
		var f stagecontract.ManifestFile
		if err := json.Unmarshal(rec, &f); err != nil {
			return fmt.Errorf("read back the temporary file: %w", err)
		}
		files = append(files, f)
		return nil
	})
	return files, err
}

// manifestBody writes m, with the spilled entries spliced in as its files
// and the links after them, to an unlinked temporary file (memory when none
// can be made).
func (e *engine) manifestBody(m *stagecontract.Manifest, links *spill) (io.ReaderAt, int64, error) {
	m.Files = []stagecontract.ManifestFile{}
	head, err := m.Marshal()
	m.Files = nil
	if err != nil {
		return nil, 0, fmt.Errorf("encode manifest: %w", err)
	}
	// Strings escape '"', so this is the files field and nothing else.
	open := []byte(`"files": [`)
	i := bytes.Index(head, []byte(`"files": []`))
	if i < 0 {
		return nil, 0, fmt.Errorf("encode manifest: no files field")
	}
	i += len(open)
	var w io.Writer
	var buf bytes.Buffer
	f, err := os.CreateTemp("", "kdefer-manifest-*")
	if err == nil {
		_ = os.Remove(f.Name())
		w = f
	} else {
		w, f = &buf, nil
	}
	bw := newCountingWriter(w)
	bw.write(head[:i])
	sep := "\n  "
	err = e.results.each(func(rec []byte) error {
		bw.write([]byte(sep))
		bw.write(rec)
		sep = ",\n  "
		return bw.err
	})
	if sep != "\n  " {
		bw.write([]byte("\n "))
	}
	// head[i:] starts with the files' closing bracket.
	bw.write(head[i : i+1])
	if err == nil && links.n > 0 {
		bw.write([]byte(`,` + "\n " + `"links": [`))
		sep = "\n  "
		err = links.each(func(rec []byte) error {
			bw.write([]byte(sep))
			bw.write(rec)
			sep = ",\n  "
			return bw.err
		})
		bw.write([]byte("\n ]"))
	}
	bw.write(head[i+1:])
	if err == nil {
		err = bw.flush()
	}
	if err != nil {
		if f != nil {
			f.Close()
		}
		return nil, 0, fmt.Errorf("write manifest to a temporary file: %w", err)
	}
	if f != nil {
		return f, bw.n, nil
	}
	return bytes.NewReader(buf.Bytes()), bw.n, nil
}

// countingWriter buffers writes, counts the bytes and keeps the first error.
type countingWriter struct {
	w   *bufio.Writer
	n   int64
	err error
}

func newCountingWriter(w io.Writer) *countingWriter {
	return &countingWriter{w: bufio.NewWriterSize(w, 64<<10)}
}

func (c *countingWriter) write(p []byte) {
	if c.err != nil {
		return
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	c.err = err
}

func (c *countingWriter) flush() error {
	if c.err != nil {
		return c.err
	}
	return c.w.Flush()
}
