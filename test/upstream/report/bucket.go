package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// The test MinIO's root credentials (test/e2e/lib.sh starts it with them).
const (
	accessKey = "kdefertest"
	secretKey = "kdefertest-secret-key"
)

// publicPolicy lets anyone read and write BUCKET: the armed pods of
// Kubernetes' specs run in namespaces the framework makes and deletes, so
// there is no Secret of credentials in them for the stage steps.
const publicPolicy = `{"Version":"2012-10-17","Statement":[
{"Effect":"Allow","Principal":{"AWS":["*"]},"Action":["s3:GetBucketLocation","s3:ListBucket","s3:ListBucketMultipartUploads"],"Resource":["arn:aws:s3:::BUCKET"]},
{"Effect":"Allow","Principal":{"AWS":["*"]},"Action":["s3:GetObject","s3:PutObject","s3:DeleteObject","s3:AbortMultipartUpload","s3:ListMultipartUploadParts"],"Resource":["arn:aws:s3:::BUCKET/*"]}]}`

func bucketCmd(args []string) error {
	if len(args) < 3 {
		return errors.New("want make ADDR BUCKET, or count ADDR BUCKET PREFIX")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := minio.New(args[1], &minio.Options{Creds: credentials.NewStaticV4(accessKey, secretKey, ""), Region: "us-east-1"})
	if err != nil {
		return fmt.Errorf("client for %s: %w", args[1], err)
	}
	bucket := args[2]
	switch {
	case args[0] == "make" && len(args) == 3:
		if err := c.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
			return fmt.Errorf("make bucket %s: %w", bucket, err)
		}
		if err := c.SetBucketPolicy(ctx, bucket, strings.ReplaceAll(publicPolicy, "BUCKET", bucket)); err != nil {
			return fmt.Errorf("set the policy of bucket %s: %w", bucket, err)
		}
		return nil
	case args[0] == "count" && len(args) == 4:
		objects, manifests := 0, 0
		for o := range c.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: args[3], Recursive: true}) {
			if o.Err != nil {
				return fmt.Errorf("list %s/%s: %w", bucket, args[3], o.Err)
			}
			objects++
			if strings.HasSuffix(o.Key, "/_kdefer/manifest.json") {
				manifests++
			}
		}
		fmt.Printf("objects %d manifests %d\n", objects, manifests)
		return nil
	}
	return errors.New("want make ADDR BUCKET, or count ADDR BUCKET PREFIX")
}
