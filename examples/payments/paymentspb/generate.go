// Package paymentspb holds the protobuf messages and the gRPC service
// descriptions of the example payments service and its fraud check.
//
// payments.pb.go is generated; payments_grpc.go and fraud_grpc.go are
// written by hand (a small ServiceDesc and client stub each), so that
// building needs no protoc.
package paymentspb

//go:generate protoc --proto_path=. --proto_path=../../../proto --go_out=. --go_opt=paths=source_relative payments.proto
