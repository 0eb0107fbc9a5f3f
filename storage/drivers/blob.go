package drivers

import (
	"cmp"
	"context"
	"crypto/md5"
	"errors"
	"hash"
	"io"
	"io/fs"
	"net/url"
	"strconv"
	"strings"

	gcs "cloud.google.com/go/storage"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	azblobblob "github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"gocloud.dev/blob"
	_ "gocloud.dev/blob/azureblob" // azblob://
	_ "gocloud.dev/blob/fileblob"  // file://
	_ "gocloud.dev/blob/gcsblob"   // gs://
	_ "gocloud.dev/blob/memblob"   // mem://
	"gocloud.dev/gcerrors"

	"github.com/kdefer/kdefer/stagecontract"
	"github.com/kdefer/kdefer/storage"
)

// blobBackend serves file://, mem://, gs:// and azblob:// through
// gocloud.dev/blob. Credentials come from each driver's standard sources
// (GOOGLE_APPLICATION_CREDENTIALS / workload identity; AZURE_STORAGE_* and
// the Azure default credential chain); none are ever read from the URL.
type blobBackend struct {
	b *blob.Bucket
	// fr serves file:// confined to the directory (fileroot.go,
	// filewrite.go); nil for the other schemes.
	fr *fileRoot
}

func openBlob(ctx context.Context, loc storage.Location, opts storage.OpenOptions) (storage.Backend, error) {
	if problem, fix := stagecontract.CheckURLQuery(loc.Scheme, loc.Query); problem != "" {
		return nil, storage.Permanentf(fix, "%s", problem)
	}
	q := url.Values{}
	for k, v := range loc.Query {
		q[k] = v
	}
	var u string
	switch loc.Scheme {
	case "file":
		// Writes are kdefer's (filewrite.go): temporary files are always
		// next to the final object, inside the directory, so the rename
		// that publishes an object is atomic and confined whatever
		// no_tmp_dir says; it is still set for the bucket fileblob opens.
		if !q.Has("no_tmp_dir") {
			q.Set("no_tmp_dir", "true")
		}
		if opts.Create && !q.Has("create_dir") {
			q.Set("create_dir", "true")
		}
		// No ".attrs" sidecar per object unless asked for with
		// metadata=sidecar: the directory then holds only the files. The
		// skip checks need no sidecar: fileRoot.Stat computes the CRC32C
		// of a file without one.
		switch q.Get("metadata") {
		case "sidecar":
			q.Del("metadata") // fileblob's default
		case "":
			q.Set("metadata", "skip")
		}
		u = "file://" + (&url.URL{Path: loc.Bucket}).EscapedPath()
	default:
		u = loc.Scheme + "://" + loc.Bucket
	}
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	b, err := blob.OpenBucket(ctx, u)
	if err != nil {
		// Driver errors name unknown parameters; they never contain
		// credentials (none are accepted in the URL).
		return nil, &storage.Error{Class: storage.Permanent, Op: "open " + loc.String(), Fix: "fix the URL parameters", Err: errors.New(stripURL(err.Error(), u))}
	}
	bb := &blobBackend{b: b}
	if loc.Scheme == "file" {
		if bb.fr, err = openFileRoot(loc.Bucket, q.Get("metadata") == "skip", dirMode(q.Get("dir_file_mode")), opts.OpenTimeout); err != nil {
			b.Close()
			return nil, &storage.Error{Class: storage.Permanent, Op: "open " + loc.String(), Fix: "fix the directory in the URL", Err: err}
		}
	}
	return bb, nil
}

// dirMode parses dir_file_mode as fileblob does (which has refused a
// malformed one when the bucket was opened): 0777 by default.
func dirMode(s string) fs.FileMode {
	m, err := strconv.ParseUint(s, 0, 32)
	if s == "" || err != nil {
		return 0o777
	}
	return fs.FileMode(m)
}

// stripURL removes the full URL (with its query) from a driver message.
func stripURL(msg, u string) string { return strings.ReplaceAll(msg, u, storage.Redact(u)) }

func (bb *blobBackend) Put(ctx context.Context, key string, src io.ReaderAt, size int64, opts storage.PutOptions) (uint32, error) {
	if bb.fr != nil {
		crc, err := bb.fr.Put(ctx, key, src, size, storage.PutOptions{ContentType: cmp.Or(opts.ContentType, storage.DefaultContentType), Progress: opts.Progress})
		if err != nil {
			return 0, bb.wrap(err)
		}
		return crc, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // cancelling before Close aborts the write: no partial object
	const bufferSize = 4 << 20
	// azblob writes an object of more than one buffer as blocks and a
	// block list, which Azure keeps no MD5 of unless the writer gives one:
	// without it no skip check could verify the object and every rerun
	// would send it again. Its MD5 is computed in the same pass as the
	// CRC32C and given with the block list.
	var az *azblob.UploadStreamOptions
	w, err := bb.b.NewWriter(ctx, key, &blob.WriterOptions{
		ContentType: cmp.Or(opts.ContentType, storage.DefaultContentType),
		// Bound the drivers' own part buffers (gs, azblob): at most one
		// buffer per worker, 4 MiB each.
		BufferSize:     bufferSize,
		MaxConcurrency: 1,
		BeforeWrite: func(as func(any) bool) error {
			as(&az) // azblob only; the others leave az nil
			return nil
		},
	})
	if err != nil {
		return 0, bb.wrap(err)
	}
	cr := &storage.CRCReader{R: io.NewSectionReader(src, 0, size), OnN: opts.Progress}
	var r io.Reader = cr
	var sum hash.Hash
	if az != nil && az.HTTPHeaders != nil && size >= bufferSize {
		sum = md5.New()
		r = io.TeeReader(cr, sum)
	}
	n, err := storage.CopyBuffer(w, r)
	if err == nil && n != size {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		cancel()
		_ = w.Close()
		return 0, bb.wrap(err)
	}
	if sum != nil {
		// Every byte has been handed to the upload, which commits the block
		// list only once Close ends the stream: it sends this MD5 with it.
		az.HTTPHeaders.BlobContentMD5 = sum.Sum(nil)
	}
	if err := w.Close(); err != nil {
		return 0, bb.wrap(err)
	}
	return cr.CRC(), nil
}

func (bb *blobBackend) Stat(ctx context.Context, key string) (storage.ObjectInfo, error) {
	if bb.fr != nil {
		return bb.fr.Stat(ctx, key)
	}
	a, err := bb.b.Attributes(ctx, key)
	if err != nil {
		if gcerrors.Code(err) == gcerrors.NotFound {
			return storage.ObjectInfo{}, storage.NotExist(key)
		}
		return storage.ObjectInfo{}, bb.wrap(err)
	}
	oi := storage.ObjectInfo{Key: key, Size: a.Size, ModTime: a.ModTime, MD5: a.MD5}
	oi.CRC32C, oi.HasCRC32C = gcsCRC32C(a.As, a.Size)
	return oi, nil
}

// gcsCRC32C is the CRC32C GCS keeps of every object (composite ones too,
// which have no MD5), from the attributes behind as; false for the other
// stores. The client gives 0 for a CRC32C the response lacks, so 0 counts
// only for the empty object, whose CRC32C it is: any other object with a
// true CRC32C of 0 (one in 2^32) is checked by its MD5 instead.
func gcsCRC32C(as func(any) bool, size int64) (uint32, bool) {
	var attrs gcs.ObjectAttrs
	if !as(&attrs) || attrs.CRC32C == 0 && size != 0 {
		return 0, false
	}
	return attrs.CRC32C, true
}

func (bb *blobBackend) NewReader(ctx context.Context, key string, off, length int64) (io.ReadCloser, storage.ObjectInfo, error) {
	if bb.fr != nil {
		return bb.fr.NewReader(ctx, key, off, length)
	}
	r, err := bb.b.NewRangeReader(ctx, key, off, length, nil)
	if err != nil {
		if gcerrors.Code(err) == gcerrors.NotFound {
			return nil, storage.ObjectInfo{}, storage.NotExist(key)
		}
		return nil, storage.ObjectInfo{}, bb.wrap(err)
	}
	oi := storage.ObjectInfo{Key: key, Size: r.Size(), ModTime: r.ModTime()}
	var az azblobblob.DownloadStreamResponse
	if off == 0 && length < 0 && r.As(&az) {
		// The MD5 Azure keeps of the blob (a read of it all), so a
		// prefix-mode stage-in can check what it read.
		oi.MD5 = az.BlobContentMD5
		if oi.MD5 == nil && az.ContentRange == nil {
			oi.MD5 = az.ContentMD5
		}
	}
	return r, oi, nil
}

func (bb *blobBackend) List(ctx context.Context, prefix string, fn func(storage.ObjectInfo) error) error {
	if bb.fr != nil {
		return bb.fr.List(ctx, prefix, fn)
	}
	it := bb.b.List(&blob.ListOptions{Prefix: prefix})
	for {
		o, err := it.Next(ctx)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return bb.wrap(err)
		}
		if o.IsDir {
			continue
		}
		oi := storage.ObjectInfo{Key: o.Key, Size: o.Size, ModTime: o.ModTime, MD5: o.MD5}
		oi.CRC32C, oi.HasCRC32C = gcsCRC32C(o.As, o.Size)
		if err := fn(oi); err != nil {
			return err
		}
	}
}

func (bb *blobBackend) Delete(ctx context.Context, key string) error {
	if bb.fr != nil {
		return bb.fr.Delete(key)
	}
	err := bb.b.Delete(ctx, key)
	if err != nil && gcerrors.Code(err) != gcerrors.NotFound {
		return bb.wrap(err)
	}
	return nil
}

func (bb *blobBackend) Close() error {
	if bb.fr != nil {
		bb.fr.Close()
	}
	return bb.b.Close()
}

func (bb *blobBackend) wrap(err error) error {
	var e *storage.Error
	if errors.As(err, &e) {
		return err
	}
	class, fix := storage.Classify(err)
	return &storage.Error{Class: class, Fix: fix, Err: err}
}
