package walletpb

import (
	"context"

	"google.golang.org/grpc"
)

// Full names of the Wallet service and its methods.
const (
	// ServiceName is the full name of the Wallet service.
	ServiceName = "opledger.testkit.wallet.v1.Wallet"
	// DepositMethod is the full method name of Wallet.Deposit.
	DepositMethod = "/" + ServiceName + "/Deposit"
	// GetDepositMethod is the full method name of Wallet.GetDeposit.
	GetDepositMethod = "/" + ServiceName + "/GetDeposit"
)

// WalletServer is the server API of the Wallet service.
type WalletServer interface {
	// Deposit records one deposit (the keyed mutation).
	Deposit(context.Context, *DepositRequest) (*DepositReply, error)
	// GetDeposit reads one deposit.
	GetDeposit(context.Context, *GetDepositRequest) (*DepositReply, error)
}

// RegisterWalletServer registers srv with s.
func RegisterWalletServer(s grpc.ServiceRegistrar, srv WalletServer) {
	s.RegisterService(&WalletServiceDesc, srv)
}

// WalletServiceDesc is the grpc.ServiceDesc of the Wallet service.
var WalletServiceDesc = grpc.ServiceDesc{
	ServiceName: ServiceName,
	HandlerType: (*WalletServer)(nil),
	Methods: []grpc.MethodDesc{
		unary("Deposit", DepositMethod, WalletServer.Deposit),
		unary("GetDeposit", GetDepositMethod, WalletServer.GetDeposit),
	},
	Metadata: "wallet.proto",
}

// unary describes the unary method name (full name method) that call
// serves: it decodes a Req and runs call through the server's interceptor.
func unary[Req any](name, method string, call func(WalletServer, context.Context, *Req) (*DepositReply, error)) grpc.MethodDesc {
	handler := func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := new(Req)
		if err := dec(in); err != nil {
			return nil, err
		}
		run := func(ctx context.Context, req any) (any, error) { return call(srv.(WalletServer), ctx, req.(*Req)) }
		if interceptor == nil {
			return run(ctx, in)
		}
		return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: method}, run)
	}
	return grpc.MethodDesc{MethodName: name, Handler: handler}
}

// WalletClient is the client API of the Wallet service.
type WalletClient interface {
	// Deposit records one deposit (the keyed mutation).
	Deposit(ctx context.Context, in *DepositRequest, opts ...grpc.CallOption) (*DepositReply, error)
	// GetDeposit reads one deposit.
	GetDeposit(ctx context.Context, in *GetDepositRequest, opts ...grpc.CallOption) (*DepositReply, error)
}

// NewWalletClient returns a client of the Wallet service on cc.
func NewWalletClient(cc grpc.ClientConnInterface) WalletClient { return walletClient{cc} }

type walletClient struct{ cc grpc.ClientConnInterface }

func (c walletClient) Deposit(ctx context.Context, in *DepositRequest, opts ...grpc.CallOption) (*DepositReply, error) {
	return c.invoke(ctx, DepositMethod, in, opts)
}

func (c walletClient) GetDeposit(ctx context.Context, in *GetDepositRequest, opts ...grpc.CallOption) (*DepositReply, error) {
	return c.invoke(ctx, GetDepositMethod, in, opts)
}

func (c walletClient) invoke(ctx context.Context, method string, in any, opts []grpc.CallOption) (*DepositReply, error) {
	out := new(DepositReply)
	if err := c.cc.Invoke(ctx, method, in, out, opts...); err != nil {
		return nil, err
	}
	return out, nil
}
