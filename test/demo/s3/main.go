// Command s3 is the small S3 client of `make demo` and the e2e tier (no mc
// needed): it makes buckets, writes a generated input dataset, lists objects
// and prints one.
//
//	go run ./test/demo/s3 [-endpoint 10.88.0.1:9000] mb BUCKET...
//	go run ./test/demo/s3 gen BUCKET/PREFIX FILES SIZE   # deterministic dataset
//	go run ./test/demo/s3 ls BUCKET[/PREFIX]
//	go run ./test/demo/s3 cat BUCKET/KEY
//
// Credentials: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, default the test
// servers' (test/s3server).
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

func main() {
	endpoint := flag.String("endpoint", "10.88.0.1:9000", "S3 endpoint host:port (plain HTTP)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: s3 [-endpoint HOST:PORT] mb BUCKET... | gen BUCKET/PREFIX FILES SIZE | ls BUCKET[/PREFIX] | cat BUCKET/KEY")
	}
	flag.Parse()
	if err := run(*endpoint, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "s3:", err)
		os.Exit(1)
	}
}

func env(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func split(p string) (bucket, key string) {
	bucket, key, _ = strings.Cut(strings.TrimPrefix(p, "s3://"), "/")
	return bucket, key
}

func run(endpoint string, args []string) error {
	if len(args) == 0 {
		flag.Usage()
		return fmt.Errorf("no command")
	}
	c, err := minio.New(endpoint, &minio.Options{
		Creds:        credentials.NewStaticV4(env("AWS_ACCESS_KEY_ID", "kdefertest"), env("AWS_SECRET_ACCESS_KEY", "kdefertest-secret-key"), ""),
		Region:       "us-east-1",
		BucketLookup: minio.BucketLookupPath,
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	switch cmd := args[0]; {
	case cmd == "mb" && len(args) >= 2:
		for _, b := range args[1:] {
			exists, err := c.BucketExists(ctx, b)
			if err != nil {
				return err
			}
			if !exists {
				if err := c.MakeBucket(ctx, b, minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
					return err
				}
			}
		}
		return nil
	case cmd == "gen" && len(args) == 4:
		bucket, prefix := split(args[1])
		n, err1 := strconv.Atoi(args[2])
		size, err2 := strconv.Atoi(args[3])
		if err1 != nil || err2 != nil || n < 1 || size < 0 {
			return fmt.Errorf("gen: FILES and SIZE must be numbers")
		}
		for i := range n {
			key := strings.TrimSuffix(prefix, "/") + fmt.Sprintf("/event-%03d.dat", i)
			data := Dataset(i, size)
			if _, err := c.PutObject(ctx, bucket, strings.TrimPrefix(key, "/"), bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
				return err
			}
		}
		return nil
	case cmd == "ls" && len(args) == 2:
		bucket, prefix := split(args[1])
		w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(w, "SIZE\tMODIFIED\tKEY\t")
		for o := range c.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
			if o.Err != nil {
				return o.Err
			}
			fmt.Fprintf(w, "%d\t%s\t%s\t\n", o.Size, o.LastModified.UTC().Format("15:04:05.000"), o.Key)
		}
		return w.Flush()
	case cmd == "cat" && len(args) == 2:
		bucket, key := split(args[1])
		o, err := c.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
		if err != nil {
			return err
		}
		defer o.Close()
		_, err = io.Copy(os.Stdout, o)
		return err
	}
	flag.Usage()
	return fmt.Errorf("bad command %q", strings.Join(args, " "))
}

// Dataset is file i of a generated input dataset: size bytes of text lines,
// deterministic so the demo's compute step output can be checked.
func Dataset(i, size int) []byte {
	var b bytes.Buffer
	for n := 0; b.Len() < size; n++ {
		fmt.Fprintf(&b, "event %d.%d energy=%d.%03d GeV\n", i, n, (i*7919+n*104729)%500, (n*31)%1000)
	}
	return b.Bytes()[:size]
}
