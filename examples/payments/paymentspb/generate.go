// Package paymentspb holds the protobuf messages and the gRPC service
// description of the example payments service.
//
// payments.pb.go is generated; payments_grpc.go is written by hand (a
// small ServiceDesc and client stub), so that building needs no protoc.
package paymentspb

//go:generate protoc --proto_path=. --go_out=. --go_opt=paths=source_relative payments.proto
