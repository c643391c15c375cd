package main

import (
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"strings"
)

// Example is the demo's usage: "kvdemo demo" runs the story and checks it,
// "kvdemo inspect" shows what it left in the store.
func Example() {
	dir, err := os.MkdirTemp("", "kvdemo-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "kvdemo.db")

	fmt.Println("demo exit code", run([]string{"demo", "-db", path}, io.Discard, os.Stderr))
	var out strings.Builder
	code := run([]string{"inspect", "-db", path}, &out, os.Stderr)
	fmt.Print(strings.ReplaceAll(out.String(), dir+string(filepath.Separator), ""))
	fmt.Println("inspect exit code", code)
	// Output:
	// demo exit code 0
	// store kvdemo.db
	//
	// bucket    keys
	// "bank"    3
	// "kvdemo"  1
	//
	// account  balance
	// alice    1140
	// bob      810
	// carol    635
	// inspect exit code 0
}
