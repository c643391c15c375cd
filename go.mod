module github.com/oncekv/oncekv

go 1.26

require (
	github.com/anishathalye/porcupine v1.3.1
	github.com/stretchr/testify v1.12.1
	github.com/vmihailenco/msgpack/v5 v5.4.1
	go.etcd.io/bbolt v1.4.3
	pgregory.net/rapid v1.3.0
)

require (
	github.com/vmihailenco/tagparser/v2 v2.0.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.29.0 // indirect
)
