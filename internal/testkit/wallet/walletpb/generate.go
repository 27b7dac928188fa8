// Package walletpb holds the messages and the gRPC service description of
// the Wallet service, the test fixture that grpcint's, connectint's and
// xdstest's tests serve: Deposit, a mutation their catalog marks keyed, and
// GetDeposit, a read (NO_SIDE_EFFECTS in the descriptor).
//
// wallet.pb.go is generated; wallet_grpc.go is written by hand (the
// ServiceDesc and a client stub), so that building needs no protoc.
package walletpb

//go:generate protoc --proto_path=. --go_out=. --go_opt=paths=source_relative wallet.proto
