package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/opledger/opledger/outbox"
)

// deadFlags are relay's flags for the dead messages.
type deadFlags struct {
	list           bool
	retry, discard string
}

func (f deadFlags) any() bool { return f.list || f.retry != "" || f.discard != "" }

// deadListLimit is how many dead messages relay --dead lists.
const deadListLimit = 1000

// runRelayDead lists, retries or discards dead messages: relay --dead,
// --retry-dead ID, --discard-dead ID. They need the database only.
func runRelayDead(ctx context.Context, fs *flag.FlagSet, f deadFlags, dsn, table string, stdout, stderr io.Writer) int {
	n := 0
	var other string
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "dead", "retry-dead", "discard-dead":
			n++
		case "dsn", "table", "v":
		default:
			other = fl.Name
		}
	})
	switch {
	case n > 1:
		return fail(stderr, "relay", errors.New("--dead, --retry-dead and --discard-dead go one at a time"))
	case other != "":
		return fail(stderr, "relay", fmt.Errorf("--%s has no use with --dead, --retry-dead or --discard-dead (they take --dsn and --table)", other))
	case fs.NArg() > 0:
		return fail(stderr, "relay", unexpectedArg(fs))
	}
	db, t, err := openExisting(ctx, dsn)
	if err != nil {
		return fail(stderr, "relay", err)
	}
	defer db.Close()
	ob, err := outbox.New(t.dialect, outbox.WithTable(outbox.TableFor(table)))
	if err != nil {
		return fail(stderr, "relay", err)
	}
	switch {
	case f.list:
		dead, err := ob.Dead(ctx, db, deadListLimit+1)
		if err != nil {
			return fail(stderr, "relay", err)
		}
		printDead(stdout, outbox.TableFor(table), dead)
	case f.retry != "":
		m, err := ob.RetryDead(ctx, db, f.retry)
		if err != nil {
			return failDead(stderr, err)
		}
		fmt.Fprintf(stdout, "retried dead message %s: it is an ordinary message again, published at the relay's next batch, %s\n",
			describeDead(m), behind(m, "then"))
	default:
		m, err := ob.DiscardDead(ctx, db, f.discard)
		if err != nil {
			return failDead(stderr, err)
		}
		fmt.Fprintf(stdout, "discarded dead message %s: deleted, it will never be published; %s\n", describeDead(m), behind(m, "next"))
	}
	return 0
}

// failDead reports a failed retry or discard: exit 1 for an id of no
// dead message, 2 otherwise.
func failDead(stderr io.Writer, err error) int {
	code := fail(stderr, "relay", err)
	if errors.Is(err, outbox.ErrNotDead) {
		return 1
	}
	return code
}

func describeDead(m outbox.DeadMessage) string {
	return fmt.Sprintf("%s (seq %d, key %q, topic %q, name %q, %d bytes, %s, dead since %s: %s)", m.ID, m.Seq, m.Key, m.Topic, m.Name,
		m.PayloadSize, attempts(m.Attempts), m.DeadAt.Format(time.RFC3339), m.Reason)
}

func attempts(n int64) string {
	if n == 1 {
		return "1 attempt"
	}
	return strconv.FormatInt(n, 10) + " attempts"
}

// behind says what happens to the messages of m's key that waited.
func behind(m outbox.DeadMessage, when string) string {
	switch m.Waiting {
	case 0:
		return "no message of its key waits behind it"
	case 1:
		return when + " the 1 message of its key that waits behind it"
	}
	return fmt.Sprintf("%s the %d messages of its key that wait behind it, in order", when, m.Waiting)
}

func printDead(w io.Writer, table string, dead []outbox.DeadMessage) {
	if len(dead) == 0 {
		fmt.Fprintf(w, "no dead messages in %s\n", table)
		return
	}
	more := len(dead) > deadListLimit
	if more {
		dead = dead[:deadListLimit]
	}
	fmt.Fprintf(w, "dead messages in %s, oldest first (each holds back the later messages of its key):\n", table)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tID\tKEY\tTOPIC\tNAME\tBYTES\tATTEMPTS\tDEAD SINCE\tWAITING\tREASON")
	for _, m := range dead {
		fmt.Fprintf(tw, "%d\t%s\t%q\t%q\t%q\t%d\t%d\t%s\t%d\t%s\n", m.Seq, m.ID, m.Key, m.Topic, m.Name, m.PayloadSize, m.Attempts,
			m.DeadAt.Format(time.RFC3339), m.Waiting, m.Reason)
	}
	tw.Flush()
	if more {
		fmt.Fprintf(w, "only the oldest %d are listed\n", deadListLimit)
	}
	fmt.Fprintln(w, "retry one with --retry-dead ID (after fixing what refused it), or delete it with --discard-dead ID")
}
