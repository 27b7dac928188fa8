package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/emptypb"
)

// writePolicyDescriptors writes a FileDescriptorSet with
// shop.v1.Orders{Get NO_SIDE_EFFECTS, Put IDEMPOTENT, Create (unknown)}.
func writePolicyDescriptors(t *testing.T, dir string) string {
	t.Helper()
	empty := ".google.protobuf.Empty"
	m := func(name string, l *descriptorpb.MethodOptions_IdempotencyLevel) *descriptorpb.MethodDescriptorProto {
		md := &descriptorpb.MethodDescriptorProto{Name: proto.String(name), InputType: &empty, OutputType: &empty}
		if l != nil {
			md.Options = &descriptorpb.MethodOptions{IdempotencyLevel: l}
		}
		return md
	}
	set := &descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{
		protodesc.ToFileDescriptorProto(emptypb.File_google_protobuf_empty_proto),
		{
			Name:       proto.String("shop/v1/shop.proto"),
			Package:    proto.String("shop.v1"),
			Dependency: []string{"google/protobuf/empty.proto"},
			Syntax:     proto.String("proto3"),
			Service: []*descriptorpb.ServiceDescriptorProto{{Name: proto.String("Orders"), Method: []*descriptorpb.MethodDescriptorProto{
				m("Get", descriptorpb.MethodOptions_NO_SIDE_EFFECTS.Enum()),
				m("Put", descriptorpb.MethodOptions_IDEMPOTENT.Enum()),
				m("Create", nil),
			}}},
		},
	}}
	b, err := proto.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "shop.pb")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRunPolicyCheck(t *testing.T) {
	dir := t.TempDir()
	desc := writePolicyDescriptors(t, dir)
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	retry := `"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}`
	good := write("good.json", `{"methodConfig":[{"name":[{"service":"shop.v1.Orders","method":"Get"},{"service":"shop.v1.Orders","method":"Put"}],`+retry+`}]}`)
	bad := write("bad.json", `{"methodConfig":[{"name":[{"service":"shop.v1.Orders","method":"Gett"},{"service":"shop.v1.Orders","method":"Create"}],`+
		strings.Replace(retry, `"UNAVAILABLE"`, `"unavailable"`, 1)+`}]}`)
	keyed := write("keyed.json", `{"methodConfig":[{"name":[{"service":"shop.v1.Orders","method":"Create"}],`+retry+`}]}`)
	notJSON := write("broken.json", `{"methodConfig":`)

	cases := []struct {
		name       string
		args       []string
		code       int
		wantOut    []string // substrings, one per stdout line
		wantErrSub string
	}{
		{"clean", []string{"check", "--service-config", good, "--descriptors", desc}, 0, nil, ""},
		{"findings", []string{"check", "--service-config", bad, "--descriptors", desc}, 1, []string{
			`unknown-method: methodConfig[0].name[0] name "/shop.v1.Orders/Gett"`,
			`code-case: methodConfig[0].retryPolicy.retryableStatusCodes[0]`,
			`retry-non-idempotent: methodConfig[0].name[1] name "/shop.v1.Orders/Create"`,
		}, "3 finding(s)"},
		{"mesh owner", []string{"check", "--owner", "mesh", "--service-config", good, "--descriptors", desc}, 1, []string{
			`retry-not-owned: methodConfig[0].retryPolicy name "/shop.v1.Orders/Get"`,
			`retry-not-owned: methodConfig[0].retryPolicy name "/shop.v1.Orders/Put"`,
		}, "owner mesh"},
		{"keyed with ledger", []string{"check", "--service-config", keyed, "--descriptors", desc, "--keyed", "/shop.v1.Orders/Create"}, 0, nil, ""},
		{"keyed without ledger", []string{"check", "--service-config", keyed, "--descriptors", desc, "--keyed-no-ledger", "/shop.v1.Orders/Create"}, 1, []string{
			`retry-keyed-without-ledger: methodConfig[0].name[0] name "/shop.v1.Orders/Create"`,
		}, ""},
		{"syntax", []string{"check", "--service-config", notJSON, "--descriptors", desc}, 1, []string{`syntax: (document)`}, ""},
		{"no args", nil, 2, nil, "missing subcommand"},
		{"unknown subcommand", []string{"lint"}, 2, nil, `unknown subcommand "lint"`},
		{"missing service config", []string{"check", "--descriptors", desc}, 2, nil, "--service-config, --mesh, --xds, --istio or --resolve-window is required"},
		{"missing descriptors", []string{"check", "--service-config", good}, 2, nil, "--descriptors is required"},
		{"bad owner", []string{"check", "--owner", "sidecar", "--service-config", good, "--descriptors", desc}, 2, nil, "--owner"},
		{"bad flag", []string{"check", "--nope"}, 2, nil, "flag provided but not defined"},
		{"positional", []string{"check", "--service-config", good, "--descriptors", desc, "extra"}, 2, nil, `unexpected argument "extra"`},
		{"missing file", []string{"check", "--service-config", filepath.Join(dir, "nope.json"), "--descriptors", desc}, 2, nil, "no such file"},
		{"bad descriptors", []string{"check", "--service-config", good, "--descriptors", good}, 2, nil, "invalid descriptors"},
		{"keyed unknown method", []string{"check", "--service-config", good, "--descriptors", desc, "--keyed", "/shop.v1.Orders/Nope"}, 2, nil, "unknown method"},
		{"keyed malformed", []string{"check", "--service-config", good, "--descriptors", desc, "--keyed", "Create"}, 2, nil, "not a full method name"},
		{"help", []string{"check", "-h"}, 0, nil, ""},
	}
	for _, tc := range cases {
		var out, errOut bytes.Buffer
		code := runPolicy(context.Background(), tc.args, &out, &errOut)
		if code != tc.code {
			t.Errorf("%s: exit %d, want %d\nstdout: %s\nstderr: %s", tc.name, code, tc.code, out.String(), errOut.String())
			continue
		}
		lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		if tc.wantOut != nil {
			if len(lines) != len(tc.wantOut) {
				t.Errorf("%s: %d lines, want %d:\n%s", tc.name, len(lines), len(tc.wantOut), out.String())
				continue
			}
			for i, w := range tc.wantOut {
				if !strings.Contains(lines[i], w) {
					t.Errorf("%s: line %d = %q, want it to contain %q", tc.name, i, lines[i], w)
				}
			}
		} else if code != 0 && out.Len() != 0 {
			t.Errorf("%s: unexpected stdout %q", tc.name, out.String())
		}
		if tc.wantErrSub != "" && !strings.Contains(errOut.String(), tc.wantErrSub) {
			t.Errorf("%s: stderr %q, want it to contain %q", tc.name, errOut.String(), tc.wantErrSub)
		}
		if code == 2 && strings.Count(strings.TrimSuffix(errOut.String(), "\n"), "\n") != 0 {
			t.Errorf("%s: usage error spans lines: %q", tc.name, errOut.String())
		}
	}
	// The command is registered with main's dispatcher.
	if _, ok := commands()["policy"]; !ok {
		t.Error("policy is not registered in commands()")
	}
}

// meshSample is a sample file of policy/mesh.
func meshSample(name string) string {
	return filepath.Join("..", "..", "policy", "mesh", "testdata", name)
}

func TestRunPolicyCheckMesh(t *testing.T) {
	dir := t.TempDir()
	desc := writePolicyDescriptors(t, dir)
	run := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := runPolicy(context.Background(), args, &out, &errOut)
		return code, out.String(), errOut.String()
	}

	// Istio's defaults on a channel the application owns: a second owner for
	// every method, the non-idempotent Create retried, no budget; and the
	// amplification table.
	code, out, errOut := run("check", "--descriptors", desc, "--owner", "application", "--mesh", meshSample("istio-default.yaml"))
	if code != 1 || !strings.Contains(errOut, "7 finding(s) (owner application)") {
		t.Fatalf("istio default: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{
		`(defaults): second-owner: Istio defaults meshConfig.defaultHttpRetryPolicy (not set) method "/shop.v1.Orders/Create": istio retries /shop.v1.Orders/Create (3 attempts) on a channel whose retry owner is application`,
		`(defaults): retry-non-idempotent: Istio defaults`,
		"; fix: set retries: {attempts: 0} on the VirtualService route",
		"METHOD                  KIND             APPLICATION  SERVICE-CONFIG  ISTIO  TOTAL",
		"/shop.v1.Orders/Get     no-side-effects  5            1               3      15",
		"/shop.v1.Orders/Create  non-idempotent   1            1               3      3",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	// --json: one object with the findings and the methods.
	code, out, _ = run("check", "--descriptors", desc, "--owner", "mesh", "--mesh", meshSample("istio-virtualservice.yaml"), "--json")
	var rep struct {
		Owner                 string            `json:"owner"`
		ServiceConfigFindings []json.RawMessage `json:"serviceConfigFindings"`
		Findings              []struct {
			Kind, File, Method, Fix string
		} `json:"findings"`
		Methods []struct {
			Method        string          `json:"method"`
			Amplification json.RawMessage `json:"amplification"`
		} `json:"methods"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 1 {
		t.Fatalf("--json: exit %d, %v:\n%s", code, err, out)
	}
	if rep.Owner != "mesh" || len(rep.Findings) != 2 || rep.Findings[0].Kind != "retry-non-idempotent" || rep.Findings[0].Fix == "" ||
		rep.Findings[1].Kind != "route-matches-nothing" || len(rep.Methods) != 3 || string(rep.Methods[1].Amplification) != "4" {
		t.Errorf("--json: %+v", rep)
	}

	// A service config and a mesh together: the service config's findings
	// first, and its retries in the amplification.
	sc := filepath.Join(dir, "sc.json")
	if err := os.WriteFile(sc, []byte(`{"methodConfig":[{"name":[{"service":"shop.v1.Orders","method":"Get"}],"retryPolicy":{"maxAttempts":4,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, _ = run("check", "--descriptors", desc, "--service-config", sc, "--mesh", meshSample("istio-mesh-off.yaml"))
	if code != 0 || !strings.Contains(out, "/shop.v1.Orders/Get     no-side-effects  1            4               1      4") {
		t.Errorf("service config and mesh: exit %d\n%s", code, out)
	}

	// --istio alone: the defaults of a mesh whose resources are not given.
	if code, out, _ = run("check", "--descriptors", desc, "--owner", "none", "--istio"); code != 1 || !strings.Contains(out, "owner is none") {
		t.Errorf("--istio: exit %d\n%s", code, out)
	}

	// generate, then check what it wrote: no finding.
	for _, m := range []string{"istio", "linkerd"} {
		code, gen, errOut := run("generate", "--mesh", m, "--descriptors", desc, "--host", "orders.shop")
		if code != 0 {
			t.Fatalf("generate %s: exit %d: %s", m, code, errOut)
		}
		p := filepath.Join(dir, m+".yaml")
		if err := os.WriteFile(p, []byte(gen), 0o600); err != nil {
			t.Fatal(err)
		}
		code, out, errOut = run("check", "--descriptors", desc, "--owner", "mesh", "--mesh", p, "--host", "orders.shop")
		if code != 0 {
			t.Errorf("check of generated %s: exit %d\n%s%s\n%s", m, code, out, errOut, gen)
		}
	}

	// The same for a proxyless channel: the control plane's RouteConfiguration.
	code, gen, errOut := run("generate", "--mesh", "xds", "--descriptors", desc, "--host", "orders", "--cluster", "orders-cluster")
	if code != 0 {
		t.Fatalf("generate xds: exit %d: %s", code, errOut)
	}
	p := filepath.Join(dir, "xds.json")
	if err := os.WriteFile(p, []byte(gen), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut = run("check", "--descriptors", desc, "--owner", "mesh", "--xds", p, "--target", "xds:///orders"); code != 0 {
		t.Errorf("check of generated xds: exit %d\n%s%s\n%s", code, out, errOut, gen)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"check", "--descriptors", desc, "--mesh", filepath.Join(dir, "nope.yaml")}, "no such file"},
		{[]string{"generate", "--descriptors", desc, "--host", "orders", "--mesh", "xds"}, "XDSOptions.Cluster is required"},
		{[]string{"generate", "--descriptors", desc, "--host", "orders", "--mesh", "xds", "--cluster", "c", "--retries", "2"}, "not for xds"},
		{[]string{"generate", "--descriptors", desc, "--host", "orders", "--mesh", "istio", "--cluster", "c"}, "--cluster is for --mesh xds only"},
		{[]string{"check", "--descriptors", desc, "--host", "orders"}, "--service-config, --mesh, --xds, --istio or --resolve-window is required"},
		{[]string{"generate", "--descriptors", desc, "--host", "orders"}, "--mesh is required"},
		{[]string{"generate", "--descriptors", desc, "--host", "orders", "--mesh", "consul"}, `--mesh "consul": want istio, linkerd or xds`},
		{[]string{"generate", "--descriptors", desc, "--mesh", "istio"}, "--host is required"},
		{[]string{"generate", "--host", "orders", "--mesh", "istio"}, "--descriptors is required"},
		{[]string{"generate", "--descriptors", desc, "--mesh", "istio", "--host", "orders", "--retries", "9"}, "Retries 9 outside"},
		{[]string{"generate", "--descriptors", desc, "--mesh", "istio", "--host", "orders", "--keyed", "/shop.v1.Orders/Nope"}, "unknown method"},
	} {
		code, out, errOut := run(tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) || out != "" {
			t.Errorf("%q: exit %d, stderr %q, stdout %q; want 2 and %q", tc.args, code, errOut, out, tc.want)
		}
	}

	// The help lists the formats.
	_, help, _ := run("check", "--help")
	for _, want := range []string{"VirtualService", "DestinationRule", "defaultHttpRetryPolicy", "RouteConfiguration", "ServiceProfile",
		"retry.linkerd.io/http", "HTTPRoute", "GRPCRoute", "gRFC A44", "--json", "generate"} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q", want)
		}
	}
}
