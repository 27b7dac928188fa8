package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/opledger/opledger/policy"
	"github.com/opledger/opledger/policy/serviceconfig"
)

func init() {
	extraCommands["policy"] = command{"check a service config's retry ownership against proto descriptors (check)", runPolicy}
}

const policyUsage = `usage: opledger policy check --service-config FILE --descriptors FILE [--owner OWNER]
                             [--keyed METHOD]... [--keyed-no-ledger METHOD]...

Validates a gRPC service config (JSON) against the methods of a binary
FileDescriptorSet (protoc --descriptor_set_out, buf build -o) and the channel's
retry owner: application, service-config (default), mesh or none.
Prints one finding per line; exits 1 if there is any, 2 on usage or I/O errors.

flags:
  --service-config FILE     the service config JSON
  --descriptors FILE        the FileDescriptorSet with the services called on the channel
  --owner OWNER             the channel's retry owner (default service-config)
  --keyed METHOD            /pkg.Service/Method is a keyed mutation backed by a durable ledger (repeatable)
  --keyed-no-ledger METHOD  /pkg.Service/Method is a keyed mutation without a ledger (repeatable)
`

// maxPolicyConfigBytes bounds the service config file.
const maxPolicyConfigBytes = 4 << 20

// runPolicy implements "opledger policy": exit 0 when the service config
// has no findings, 1 when it has some (one per line on stdout), 2 on usage
// or I/O errors (one line on stderr).
func runPolicy(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "opledger policy: missing subcommand (usage: opledger policy check --service-config FILE --descriptors FILE [--owner OWNER])")
		return 2
	}
	switch args[0] {
	case "check":
		return runPolicyCheck(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		io.WriteString(stdout, policyUsage)
		return 0
	default:
		fmt.Fprintf(stderr, "opledger policy: unknown subcommand %q (want check)\n", maskCredentials(args[0]))
		return 2
	}
}

// methodList is a repeatable flag of full method names.
type methodList []string

func (m *methodList) String() string { return strings.Join(*m, ",") }
func (m *methodList) Set(s string) error {
	if _, _, ok := policy.SplitFullMethod(s); !ok {
		return fmt.Errorf("%q is not a full method name like /pkg.Service/Method", s)
	}
	*m = append(*m, s)
	return nil
}

func runPolicyCheck(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("opledger policy check", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported on one line below
	scPath := fs.String("service-config", "", "")
	descPath := fs.String("descriptors", "", "")
	ownerName := fs.String("owner", policy.OwnerServiceConfig.String(), "")
	var keyed, keyedNoLedger methodList
	fs.Var(&keyed, "keyed", "")
	fs.Var(&keyedNoLedger, "keyed-no-ledger", "")
	fail := func(format string, a ...any) int {
		msg := strings.ReplaceAll(fmt.Sprintf(format, a...), "\n", " ")
		fmt.Fprintf(stderr, "opledger policy check: %s\n", msg)
		return 2
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			io.WriteString(stdout, policyUsage)
			return 0
		}
		return fail("%s (run opledger policy --help)", newArgMasker(args).mask(err.Error()))
	}
	switch {
	case fs.NArg() > 0:
		return fail("%v", unexpectedArg(fs))
	case *scPath == "":
		return fail("--service-config is required")
	case *descPath == "":
		return fail("--descriptors is required")
	}
	owner, err := policy.ParseRetryOwner(*ownerName)
	if err != nil {
		return fail("--owner: %v", err)
	}
	cat, err := policy.LoadDescriptorSetFile(*descPath)
	if err != nil {
		return fail("%v", err)
	}
	for _, m := range keyed {
		if cat, err = cat.WithKeyed(m, true); err != nil {
			return fail("--keyed: %v", err)
		}
	}
	for _, m := range keyedNoLedger {
		if cat, err = cat.WithKeyed(m, false); err != nil {
			return fail("--keyed-no-ledger: %v", err)
		}
	}
	data, err := readPolicyFile(*scPath)
	if err != nil {
		return fail("%v", err)
	}
	findings, err := serviceconfig.Validate(data, cat, owner)
	if err != nil {
		return fail("%v", err)
	}
	for _, f := range findings {
		fmt.Fprintf(stdout, "%s: %s\n", *scPath, f)
	}
	if len(findings) > 0 {
		fmt.Fprintf(stderr, "opledger policy check: %d finding(s) in %s (owner %s)\n", len(findings), *scPath, owner)
		return 1
	}
	return 0
}

func readPolicyFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxPolicyConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if len(data) > maxPolicyConfigBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxPolicyConfigBytes)
	}
	return data, nil
}
