package serviceconfig

import (
	"fmt"
	"testing"

	"github.com/opledger/opledger/policy"
)

// testCatalog is the catalog of the descriptor set of package policy's
// tests, with Create keyed and ledger-backed, and Cancel keyed without a
// ledger:
//
//	package shop.v1;
//	service Orders {
//	  rpc Get(Empty) returns (Empty) { option idempotency_level = NO_SIDE_EFFECTS; }
//	  rpc Put(Empty) returns (Empty) { option idempotency_level = IDEMPOTENT; }
//	  rpc Create(Empty) returns (Empty);   // keyed, durable ledger
//	  rpc Cancel(Empty) returns (Empty);   // keyed, no ledger
//	  rpc Watch(Empty) returns (stream Empty) { option idempotency_level = NO_SIDE_EFFECTS; }
//	  rpc Upload(stream Empty) returns (Empty);
//	  rpc Chat(stream Empty) returns (stream Empty);
//	}
//	service Catalog { rpc List(Empty) returns (Empty) { option idempotency_level = NO_SIDE_EFFECTS; } }
func testCatalog(t testing.TB) *policy.Catalog {
	t.Helper()
	c, err := policy.NewCatalog(
		policy.MethodPolicy{FullMethod: "/shop.v1.Orders/Get", Kind: policy.KindNoSideEffects},
		policy.MethodPolicy{FullMethod: "/shop.v1.Orders/Put", Kind: policy.KindIdempotent},
		policy.MethodPolicy{FullMethod: "/shop.v1.Orders/Create", Kind: policy.KindKeyed, DurableLedger: true},
		policy.MethodPolicy{FullMethod: "/shop.v1.Orders/Cancel", Kind: policy.KindKeyed},
		policy.MethodPolicy{FullMethod: "/shop.v1.Orders/Watch", Kind: policy.KindNoSideEffects, Shape: policy.ShapeServerStream},
		policy.MethodPolicy{FullMethod: "/shop.v1.Orders/Upload", Kind: policy.KindNonIdempotent, Shape: policy.ShapeClientStream},
		policy.MethodPolicy{FullMethod: "/shop.v1.Orders/Chat", Kind: policy.KindNonIdempotent, Shape: policy.ShapeBidiStream},
		policy.MethodPolicy{FullMethod: "/shop.v1.Catalog/List", Kind: policy.KindNoSideEffects},
	)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }
