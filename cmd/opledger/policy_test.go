package main

import (
	"bytes"
	"context"
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
		{"missing service config", []string{"check", "--descriptors", desc}, 2, nil, "--service-config is required"},
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
