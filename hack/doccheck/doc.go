// Package doccheck holds the tests that keep kdefer's documentation saying
// one true thing: every link in README.md and docs/ reaches a file and a
// heading that exist, every "docs/FILE.md, "Section"" or docs/FILE.md#anchor
// named in code, manifests and CRD descriptions (kubectl explain) does too,
// the user docs link nowhere outside the repository but upstream Kubernetes
// docs, and they carry no issue numbers.
package doccheck
