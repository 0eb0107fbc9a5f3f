// Package storage is the one place kdefer's stage engine talks to object
// storage: the Backend interface and the driver registry (Open, Register),
// URL parsing and redaction, error classes, retries, key checks, URL
// templates, CRC32C helpers, progress reporting, the options both engines
// share (TransferOptions), and reading and validating manifests (the schema
// itself is stagecontract's). The backends themselves are in
// storage/drivers: S3 through minio-go, everything else through
// gocloud.dev/blob.
//
// It must not import the stage engines (stagein, stageout), the drivers, any
// cloud SDK, the CRD package or anything else of Kubernetes but
// k8s.io/utils/clock, tests included: it is the bottom of the stage side,
// knows objects and keys but not pods, runs or exit codes, and it builds
// (and its fuzz targets instrument) a few dozen packages, not the SDKs' 900.
//
// Backend choice (measured on the project's 2-core machine against a local
// MinIO, see ../shared/facts/s3-baseline.md and test/bench/results.md):
// minio-go with DisableContentSha256 costs ~1.4 client CPU-s/GB uploading
// 1 MiB files and ~0.65 on 256 MiB files, while gocloud.dev's s3blob costs
// 3.2-4.6 (it hashes every byte for SigV4 and copies through its own part
// buffers). So s3:// uses minio-go; file://, mem://, gs:// and azblob:// use
// gocloud.dev/blob, where there is no cheaper client to choose and the
// portability is worth more.
package storage
