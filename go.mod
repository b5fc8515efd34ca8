module github.com/gpuslice/gpuslice

go 1.26.8

require (
	github.com/agnivade/levenshtein v1.2.2
	github.com/spf13/cobra v1.10.2
	gopkg.in/yaml.v3 v3.0.1
	sigs.k8s.io/yaml v1.6.0
)

require (
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	go.yaml.in/yaml/v2 v2.4.2 // indirect
)
