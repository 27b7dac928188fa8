package serviceconfig_test

import (
	"errors"
	"fmt"
	"log"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/opledger/opledger/policy"
	"github.com/opledger/opledger/policy/serviceconfig"
)

// Generate the service config for a channel whose retries the service
// config owns, and check another config against the catalog.
func Example() {
	cat, err := policy.NewCatalog(
		policy.MethodPolicy{FullMethod: "/shop.v1.Orders/Get", Kind: policy.KindNoSideEffects},
		policy.MethodPolicy{FullMethod: "/shop.v1.Orders/Create", Kind: policy.KindKeyed, DurableLedger: true},
		policy.MethodPolicy{FullMethod: "/shop.v1.Orders/Upload", Kind: policy.KindNonIdempotent, Shape: policy.ShapeClientStream},
	)
	if err != nil {
		panic(err)
	}
	sc, err := serviceconfig.Generate(cat, policy.OwnerServiceConfig, serviceconfig.RetrySettings{})
	if err != nil {
		panic(err)
	}
	js, _ := sc.JSON()
	fmt.Println(js) // pass to grpc.WithDefaultServiceConfig

	findings, _ := serviceconfig.Validate([]byte(`{"methodConfig":[{"name":[{"service":"shop.v1.Orders"}],
		"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`),
		cat, policy.OwnerServiceConfig)
	for _, f := range findings {
		fmt.Println(f.Kind, f.Name, f.Method)
	}
	// Output:
	// {"methodConfig":[{"name":[{"service":"shop.v1.Orders","method":"Get"}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}],"retryThrottling":{"maxTokens":10,"tokenRatio":0.1}}
	// retry-non-idempotent /shop.v1.Orders/ /shop.v1.Orders/Upload
}

// Generate the service config of a channel whose retries the service
// config owns, from the catalog of the methods the client is compiled
// from, and hand it to the channel. grpc.NewClient does not connect, and
// it refuses a service config grpc-go cannot read.
func ExampleGenerate() {
	// In a client, files is protoregistry.GlobalFiles: every file linked
	// into the binary. This example builds its own.
	files := ordersFiles()
	cat, err := policy.CatalogFromFiles(files) // or policy.LoadDescriptorSetFile(path)
	if err != nil {
		log.Fatal(err)
	}
	cat, err = cat.WithKeyed("/shop.v1.Orders/Create", true) // a durable ledger records its completions
	if err != nil {
		log.Fatal(err)
	}
	sc, err := serviceconfig.Generate(cat, policy.OwnerServiceConfig, serviceconfig.RetrySettings{})
	if err != nil {
		log.Fatal(err)
	}
	js, err := sc.JSON()
	if err != nil {
		log.Fatal(err)
	}
	conn, err := grpc.NewClient("dns:///orders.internal:443", grpc.WithDefaultServiceConfig(js),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	fmt.Println(js)
	// Output:
	// {"methodConfig":[{"name":[{"service":"shop.v1.Orders","method":"Get"},{"service":"shop.v1.Orders","method":"Put"}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}],"retryThrottling":{"maxTokens":10,"tokenRatio":0.1}}
}

// For a channel whose retries the service config does not own, the
// generated config is empty, and CheckOwnership refuses one that retries.
func ExampleCheckOwnership() {
	cat, err := policy.NewCatalog(
		policy.MethodPolicy{FullMethod: "/shop.v1.Orders/Get", Kind: policy.KindNoSideEffects},
	)
	if err != nil {
		log.Fatal(err)
	}
	mesh, err := serviceconfig.Generate(cat, policy.OwnerMesh, serviceconfig.RetrySettings{})
	if err != nil {
		log.Fatal(err)
	}
	js, _ := mesh.JSON()
	fmt.Println(js)

	owned, err := serviceconfig.Generate(cat, policy.OwnerServiceConfig, serviceconfig.RetrySettings{})
	if err != nil {
		log.Fatal(err)
	}
	err = serviceconfig.CheckOwnership(policy.OwnerMesh, owned)
	fmt.Println(errors.Is(err, serviceconfig.ErrRetryNotOwned))
	fmt.Println(err)
	// Output:
	// {}
	// true
	// serviceconfig: retryPolicy for name "/shop.v1.Orders/Get" on a channel whose retry owner is mesh: only the service-config owner may retry in the service config
}

// ordersFiles returns the descriptors of this service, as protoc would
// compile them, in a registry of its own:
//
//	service Orders {
//	  rpc Get(GetRequest) returns (Order) { option idempotency_level = NO_SIDE_EFFECTS; }
//	  rpc Put(PutRequest) returns (Order) { option idempotency_level = IDEMPOTENT; }
//	  rpc Create(CreateRequest) returns (Order);
//	}
func ordersFiles() *protoregistry.Files {
	method := func(name, in string, level descriptorpb.MethodOptions_IdempotencyLevel) *descriptorpb.MethodDescriptorProto {
		m := &descriptorpb.MethodDescriptorProto{
			Name:       proto.String(name),
			InputType:  proto.String(".shop.v1." + in),
			OutputType: proto.String(".shop.v1.Order"),
		}
		if level != descriptorpb.MethodOptions_IDEMPOTENCY_UNKNOWN {
			m.Options = &descriptorpb.MethodOptions{IdempotencyLevel: level.Enum()}
		}
		return m
	}
	var messages []*descriptorpb.DescriptorProto
	for _, name := range []string{"GetRequest", "PutRequest", "CreateRequest", "Order"} {
		messages = append(messages, &descriptorpb.DescriptorProto{Name: proto.String(name)})
	}
	files, err := protodesc.NewFiles(&descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{{
		Name:        proto.String("shop/v1/orders.proto"),
		Package:     proto.String("shop.v1"),
		Syntax:      proto.String("proto3"),
		MessageType: messages,
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name: proto.String("Orders"),
			Method: []*descriptorpb.MethodDescriptorProto{
				method("Get", "GetRequest", descriptorpb.MethodOptions_NO_SIDE_EFFECTS),
				method("Put", "PutRequest", descriptorpb.MethodOptions_IDEMPOTENT),
				method("Create", "CreateRequest", descriptorpb.MethodOptions_IDEMPOTENCY_UNKNOWN),
			},
		}},
	}}})
	if err != nil {
		log.Fatal(err)
	}
	return files
}
