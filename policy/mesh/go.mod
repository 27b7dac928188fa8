module github.com/opledger/opledger/policy/mesh

go 1.26.0

// The kit's modules are released together, at one version (docs/releasing.md);
// in this repository each resolves to its own directory.
replace github.com/opledger/opledger => ../..

require (
	github.com/opledger/opledger v0.0.0-00010101000000-000000000000
	sigs.k8s.io/yaml v1.6.0
)

require (
	go.yaml.in/yaml/v2 v2.4.2 // indirect
	golang.org/x/sys v0.50.0 // indirect
	google.golang.org/grpc v1.85.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
