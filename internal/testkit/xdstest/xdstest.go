// Package xdstest runs a real xDS control plane for tests: an in-process
// management server built with envoyproxy/go-control-plane on a loopback
// port, serving listeners, route configurations, clusters and endpoints
// (LDS, RDS, CDS, EDS over ADS) to grpc-go clients that dial xds:///NAME
// with grpc-go's own xDS resolver and balancers.
//
// The bootstrap configuration is handed to the resolver in process
// (xds.NewXDSResolverWithConfigForTesting), never through the
// GRPC_XDS_BOOTSTRAP or GRPC_XDS_BOOTSTRAP_CONFIG environment variables, so
// tests that use it can run in parallel and leak nothing into each other.
//
// The package is for tests only. It imports go-control-plane and
// google.golang.org/grpc/xds, which must never enter the dependency graph of
// a library package; .ci/run checks that no library package imports it.
package xdstest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/xds"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Service is one xds:/// target the control plane serves.
type Service struct {
	// Name is the target's name: clients dial xds:///Name. It names the
	// listener, and the route configuration is "Name-routes", the cluster
	// "Name-cluster".
	Name string
	// Endpoints are the backends' addresses (host:port), on loopback.
	Endpoints []string
	// VirtualHostRetry is the virtual host's retry_policy; nil for none.
	VirtualHostRetry *routev3.RetryPolicy
	// Routes are the virtual host's routes. Their actions are completed
	// with the service's cluster where they route to none. Empty means one
	// route with prefix "/" and no retry policy of its own.
	Routes []*routev3.Route
}

// RouteConfigurationName returns the name of the service's route
// configuration.
func (s Service) RouteConfigurationName() string { return s.Name + "-routes" }

// ClusterName returns the name of the service's cluster.
func (s Service) ClusterName() string { return s.Name + "-cluster" }

// RouteConfiguration returns the route configuration the control plane
// serves for the service: one virtual host for the domain Name, with the
// service's retry policy and routes. Marshal it with protojson to give the
// same configuration to "opledger policy check --xds".
func (s Service) RouteConfiguration() *routev3.RouteConfiguration {
	routes := s.Routes
	if len(routes) == 0 {
		routes = []*routev3.Route{{
			Name:  "all",
			Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		}}
	}
	out := make([]*routev3.Route, len(routes))
	for i, r := range routes {
		c := cloneRoute(r)
		if c.Action == nil {
			c.Action = &routev3.Route_Route{Route: &routev3.RouteAction{}}
		}
		if ra, ok := c.Action.(*routev3.Route_Route); ok && ra.Route.ClusterSpecifier == nil {
			ra.Route.ClusterSpecifier = &routev3.RouteAction_Cluster{Cluster: s.ClusterName()}
		}
		out[i] = c
	}
	return &routev3.RouteConfiguration{
		Name: s.RouteConfigurationName(),
		VirtualHosts: []*routev3.VirtualHost{{
			Name:        s.Name,
			Domains:     []string{s.Name},
			Routes:      out,
			RetryPolicy: s.VirtualHostRetry,
		}},
	}
}

// cloneRoute copies a route, so that completing its action does not change
// the caller's value.
func cloneRoute(r *routev3.Route) *routev3.Route {
	return proto.Clone(r).(*routev3.Route)
}

// RetryPolicy returns an xDS retry policy that retries the given gRPC
// conditions ("unavailable", "cancelled"…) up to numRetries times with a
// short backoff, as a control plane would write it.
func RetryPolicy(numRetries uint32, retryOn string) *routev3.RetryPolicy {
	return &routev3.RetryPolicy{
		RetryOn:    retryOn,
		NumRetries: wrapperspb.UInt32(numRetries),
		RetryBackOff: &routev3.RetryPolicy_RetryBackOff{
			BaseInterval: durationpb.New(5 * time.Millisecond),
			MaxInterval:  durationpb.New(20 * time.Millisecond),
		},
	}
}

// ControlPlane is a running xDS management server.
type ControlPlane struct {
	addr   string
	nodeID string
	cache  cachev3.SnapshotCache
	srv    *grpc.Server

	mu      sync.Mutex
	version int
	nacks   []string
}

// Start starts a control plane on a loopback port and stops it when the
// test ends.
func Start(t testing.TB) *ControlPlane {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("xdstest: listen: %v", err)
	}
	cp := &ControlPlane{
		addr:   lis.Addr().String(),
		nodeID: "opledger-xdstest-" + t.Name(),
		cache:  cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil),
	}
	cb := serverv3.CallbackFuncs{
		StreamRequestFunc: func(_ int64, req *discoveryv3.DiscoveryRequest) error {
			if d := req.GetErrorDetail(); d != nil {
				cp.mu.Lock()
				cp.nacks = append(cp.nacks, fmt.Sprintf("%s version %s: %s", req.GetTypeUrl(), req.GetVersionInfo(), d.GetMessage()))
				cp.mu.Unlock()
			}
			return nil
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	xs := serverv3.NewServer(ctx, cp.cache, cb)
	cp.srv = grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(cp.srv, xs)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = cp.srv.Serve(lis)
	}()
	t.Cleanup(func() {
		cp.srv.Stop()
		cancel()
		<-done
	})
	return cp
}

// Addr returns the management server's address.
func (cp *ControlPlane) Addr() string { return cp.addr }

// NACKs returns the error details of every response a client rejected, in
// order: a client that NACKs a route configuration keeps its previous one.
func (cp *ControlPlane) NACKs() []string {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return append([]string(nil), cp.nacks...)
}

// Bootstrap returns the grpc-go xDS bootstrap configuration (JSON) that
// points at this control plane, with insecure channel credentials.
func (cp *ControlPlane) Bootstrap() []byte {
	// Marshalling maps of strings cannot fail.
	b, _ := json.Marshal(map[string]any{
		"xds_servers": []any{map[string]any{
			"server_uri":      cp.addr,
			"channel_creds":   []any{map[string]string{"type": "insecure"}},
			"server_features": []string{"xds_v3"},
		}},
		"node": map[string]string{"id": cp.nodeID},
	})
	return b
}

// Resolver returns a grpc-go xDS resolver builder for the "xds" scheme that
// uses this control plane; pass it with grpc.WithResolvers.
func (cp *ControlPlane) Resolver() (resolver.Builder, error) {
	return xds.NewXDSResolverWithConfigForTesting(cp.Bootstrap())
}

// Dial creates a client for xds:///name through this control plane, with
// insecure transport credentials and the given options after them. The
// connection is closed when the test ends.
func (cp *ControlPlane) Dial(t testing.TB, name string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	rb, err := cp.Resolver()
	if err != nil {
		t.Fatalf("xdstest: resolver: %v", err)
	}
	all := append([]grpc.DialOption{grpc.WithResolvers(rb), grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)
	conn, err := grpc.NewClient("xds:///"+name, all...)
	if err != nil {
		t.Fatalf("xdstest: dial xds:///%s: %v", name, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// Set replaces everything the control plane serves with the given
// services: for each, a listener (an API listener whose
// HttpConnectionManager takes its routes over RDS), its route
// configuration, an EDS cluster and its endpoints. Clients receive the new
// configuration on their open streams.
func (cp *ControlPlane) Set(ctx context.Context, services ...Service) error {
	var listeners, routes, clusters, endpoints []types.Resource
	for _, s := range services {
		if s.Name == "" {
			return errors.New("xdstest: a service needs a name")
		}
		l, err := listener(s)
		if err != nil {
			return err
		}
		listeners = append(listeners, l)
		routes = append(routes, s.RouteConfiguration())
		clusters = append(clusters, cluster(s))
		e, err := loadAssignment(s)
		if err != nil {
			return err
		}
		endpoints = append(endpoints, e)
	}
	cp.mu.Lock()
	cp.version++
	version := strconv.Itoa(cp.version)
	cp.mu.Unlock()
	snap, err := cachev3.NewSnapshot(version, map[resourcev3.Type][]types.Resource{
		resourcev3.ListenerType: listeners,
		resourcev3.RouteType:    routes,
		resourcev3.ClusterType:  clusters,
		resourcev3.EndpointType: endpoints,
	})
	if err != nil {
		return fmt.Errorf("xdstest: snapshot: %w", err)
	}
	// snap.Consistent is not checked: it looks for route references in
	// filter chains only, not in the API listeners gRPC clients use.
	return cp.cache.SetSnapshot(ctx, cp.nodeID, snap)
}

func ads() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ResourceApiVersion:    corev3.ApiVersion_V3,
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
	}
}

func listener(s Service) (*listenerv3.Listener, error) {
	router, err := anypb.New(&routerv3.Router{})
	if err != nil {
		return nil, fmt.Errorf("xdstest: router filter: %w", err)
	}
	hcm, err := anypb.New(&hcmv3.HttpConnectionManager{
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource:    ads(),
			RouteConfigName: s.RouteConfigurationName(),
		}},
		HttpFilters: []*hcmv3.HttpFilter{{
			Name:       "router",
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router},
		}},
	})
	if err != nil {
		return nil, fmt.Errorf("xdstest: http connection manager: %w", err)
	}
	return &listenerv3.Listener{
		Name:        s.Name,
		ApiListener: &listenerv3.ApiListener{ApiListener: hcm},
	}, nil
}

func cluster(s Service) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 s.ClusterName(),
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: ads()},
		LbPolicy:             clusterv3.Cluster_ROUND_ROBIN,
	}
}

func loadAssignment(s Service) (*endpointv3.ClusterLoadAssignment, error) {
	var lbs []*endpointv3.LbEndpoint
	for _, addr := range s.Endpoints {
		host, portText, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("xdstest: endpoint %q: %w", addr, err)
		}
		port, err := strconv.ParseUint(portText, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("xdstest: endpoint %q: %w", addr, err)
		}
		lbs = append(lbs, &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
					Address:       host,
					PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(port)},
				}}},
			}},
			HealthStatus: corev3.HealthStatus_HEALTHY,
		})
	}
	return &endpointv3.ClusterLoadAssignment{
		ClusterName: s.ClusterName(),
		Endpoints: []*endpointv3.LocalityLbEndpoints{{
			Locality:            &corev3.Locality{Region: "loopback"},
			LbEndpoints:         lbs,
			LoadBalancingWeight: wrapperspb.UInt32(1),
		}},
	}, nil
}
