// Command apisurface writes or checks the exported surface of the kit's
// public packages (api/opledger.txt) and prints its size.
//
//	go run ./internal/apisurface/cmd/apisurface          # check
//	go run ./internal/apisurface/cmd/apisurface -write   # rewrite the file
//	go run ./internal/apisurface/cmd/apisurface -count   # names per package
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/opledger/opledger/internal/apisurface"
)

func main() {
	write := flag.Bool("write", false, "rewrite the file from the code")
	count := flag.Bool("count", false, "print the counted names per package")
	root := flag.String("root", ".", "the repository's root")
	flag.Parse()
	if err := run(*root, *write, *count); err != nil {
		fmt.Fprintln(os.Stderr, "apisurface:", err)
		os.Exit(1)
	}
}

func run(root string, write, count bool) error {
	lines, err := apisurface.All(root)
	if err != nil {
		return err
	}
	if count {
		apisurface.PrintCounts(os.Stdout, lines)
		n, linked, err := apisurface.ServiceCount(root, lines)
		if err != nil {
			return err
		}
		fmt.Printf("%5d in the %d public packages a PostgreSQL + grpc-go service links\n", n, len(linked))
		return nil
	}
	if write {
		return apisurface.Write(root, lines)
	}
	return apisurface.Check(root, lines)
}
