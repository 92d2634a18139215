package apiv2

// Regenerate the Go code after editing a .proto file (needs protoc, from
// Debian's protobuf-compiler; the plugins are go.mod tools):
//
//	go generate ./proxy/apiv2
//
// The generated files are committed, so building and CI need no protoc.
//go:generate sh -c "cd ../.. && protoc -I . -I /usr/include --plugin=protoc-gen-go=$(go tool -n protoc-gen-go) --plugin=protoc-gen-go-grpc=$(go tool -n protoc-gen-go-grpc) --go_out=. --go_opt=module=github.com/stratamq/stratamq --go-grpc_out=. --go-grpc_opt=module=github.com/stratamq/stratamq proxy/apiv2/model.proto proxy/apiv2/service.proto"
