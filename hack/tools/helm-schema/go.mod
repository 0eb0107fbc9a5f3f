// helm-values-schema-json, which writes deploy/helm/kdefer/values.schema.json
// from values.yaml and its `# @schema` comments, with config.yaml here (make
// generate runs it, make verify fails when the schema is stale). Pinned here
// and built from the Go module proxy by `go tool`, which caches the binary. A
// module of its own, as ../go.mod is, so its dependencies never move kdefer's
// nor the other tools'.
module github.com/kdefer/kdefer/hack/tools/helm-schema

go 1.26

tool github.com/losisin/helm-values-schema-json/v2

require (
	github.com/fatih/structs v1.1.0 // indirect
	github.com/fsnotify/fsnotify v1.9.0 // indirect
	github.com/fxamacker/cbor/v2 v2.9.0 // indirect
	github.com/go-viper/mapstructure/v2 v2.4.0 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/knadh/koanf/maps v0.1.2 // indirect
	github.com/knadh/koanf/providers/file v1.2.0 // indirect
	github.com/knadh/koanf/providers/posflag v1.0.1 // indirect
	github.com/knadh/koanf/providers/structs v1.0.0 // indirect
	github.com/knadh/koanf/v2 v2.3.0 // indirect
	github.com/kr/pretty v0.3.1 // indirect
	github.com/losisin/helm-values-schema-json/v2 v2.3.1 // indirect
	github.com/mitchellh/copystructure v1.2.0 // indirect
	github.com/mitchellh/reflectwalk v1.0.2 // indirect
	github.com/spf13/cobra v1.10.2 // indirect
	github.com/spf13/pflag v1.0.10 // indirect
	github.com/x448/float16 v0.8.4 // indirect
	go.yaml.in/yaml/v3 v3.0.4 // indirect
	golang.org/x/sys v0.34.0 // indirect
)
