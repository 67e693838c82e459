package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/pborman/getopt/v2"
)

// ErrHelp is what Parse returns for -h or --help, after which the tool prints
// its usage and exits 0.
var ErrHelp = errors.New("help requested")

// Options is a command line in the syntax of glibc's getopt_long, which the
// stock rdma-core and perftest tools use: short options bundled (-ce) or
// with their argument attached (-n10) or separate (-n 10), long options with
// "=" (--size=64) or a separate argument (--size 64), and options and operands
// in any order (GNU permutation: "rc 127.0.0.1 -n 10"), "--" ending the
// options. getopt (github.com/pborman/getopt/v2) parses the options; Options
// adds the permutation, which that package, like BSD getopt, stops at.
type Options struct {
	*getopt.Set
	prog          string
	help, version bool
}

// NewOptions returns an empty command line of program prog with -h/--help.
func NewOptions(prog string) *Options {
	o := &Options{Set: getopt.New(), prog: prog}
	o.SetProgram(prog)
	o.FlagLong(&o.help, "help", 'h', "print this help and exit")
	// Tools answer -version and --version before parsing (version.Requested);
	// the entry lists it in the help.
	o.FlagLong(&o.version, "version", 0, "print the version and exit")
	return o
}

// Parse parses args (without the program name) and returns the operands in
// order. Errors are one line in the tool's own option names; -h gives ErrHelp.
func (o *Options) Parse(args []string) ([]string, error) {
	var operands []string
	rest := args
	for {
		err := o.Getopt(append([]string{o.prog}, rest...), nil)
		if err != nil {
			return nil, optionError(err)
		}
		if o.help {
			return nil, ErrHelp
		}
		rest = o.Args()
		if o.State() == getopt.DashDash {
			return append(operands, rest...), nil
		}
		if len(rest) == 0 {
			return operands, nil
		}
		operands = append(operands, rest[0])
		rest = rest[1:]
	}
}

// optionError rewords getopt's errors: an unusable value names the option
// and the value instead of strconv's message.
func optionError(err error) error {
	var ge *getopt.Error
	if !errors.As(err, &ge) {
		return err
	}
	switch ge.ErrorCode {
	case getopt.Invalid:
		return fmt.Errorf("invalid value %q for %s: %v", ge.Parameter, ge.Name, ge.Err)
	case getopt.MissingParameter:
		return fmt.Errorf("option %s needs a value", ge.Name)
	}
	return err
}

// PrintUsage writes "Usage: PROG SYNOPSIS", the lines of about, and the
// option table.
func (o *Options) PrintUsage(w io.Writer, synopsis string, about ...string) {
	fmt.Fprintf(w, "Usage: %s %s\n", o.prog, synopsis)
	if len(about) > 0 {
		fmt.Fprintf(w, "\n%s\n", strings.Join(about, "\n"))
	}
	fmt.Fprintln(w, "\nOptions:")
	o.PrintOptions(w)
}
