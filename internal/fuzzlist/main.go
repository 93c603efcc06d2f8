// Command fuzzlist prints every fuzz target of the module as package:FuncName:inputs, one
// per line, for `make fuzz-smoke`: inputs is the target's smoke budget, a count for
// `go test -fuzztime`.
//
// The budget is a count of inputs, not a duration: with a duration, Go 1.26's fuzzing
// coordinator races its own deadline at shutdown on a loaded machine and fails a target
// now and then with a bare "context deadline exceeded" and no failing input
// (golang/go#75804, fixed in Go 1.27). A count has no deadline to race.
package main

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

var fuzzFunc = regexp.MustCompile(`^func (Fuzz\w+)\(\w+ \*testing\.F\)`)

// defaultInputs is the smoke budget of a parser target: one to three seconds here.
const defaultInputs = 100000

// slowInputs are the budgets of targets that run real connections (or a whole fake RDMA
// fabric) per input, sized for a few seconds each here (about 60, 1,500 and 1,300 inputs
// a second; FuzzFabric about 11,000).
var slowInputs = map[string]int{
	"FuzzServerHandshake": 300,
	"FuzzPeerCDC":         5000,
	"FuzzAdversarialPeer": 300,
	"FuzzParseWire":       5000,
	"FuzzFabric":          20000,
	"FuzzHandle":          20000, // a link group per input, about 8,000 a second
}

func main() {
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != "." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		s := bufio.NewScanner(f)
		for s.Scan() {
			if m := fuzzFunc.FindStringSubmatch(s.Text()); m != nil {
				n, ok := slowInputs[m[1]]
				if !ok {
					n = defaultInputs
				}
				fmt.Printf("./%s:%s:%d\n", filepath.Dir(path), m[1], n)
			}
		}
		return s.Err()
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "fuzzlist:", err)
		os.Exit(1)
	}
}
