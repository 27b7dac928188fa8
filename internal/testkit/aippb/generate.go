// Package aippb holds the test messages and the Orders service of AIP-155
// request identification (https://google.aip.dev/155) that grpcint's and
// connectint's tests serve: CreateOrder, a mutation whose request carries
// its key in `string request_id`, and the forms of the field the kit does
// not take.
//
// orders.pb.go is generated; orders_grpc.go is written by hand (the
// ServiceDesc of CreateOrder and a client stub), so that building needs no
// protoc.
package aippb

//go:generate protoc --proto_path=. --go_out=. --go_opt=paths=source_relative orders.proto
