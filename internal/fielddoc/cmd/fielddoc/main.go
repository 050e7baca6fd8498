// Command fielddoc writes the help text of a config struct's fields, taken from their doc
// comments, into a Go file (see package fielddoc). A package runs it with go generate:
//
//	//go:generate go run github.com/petrel-mq/petrel/internal/fielddoc/cmd/fielddoc -type Config -var configHelp -o config_help.go config.go
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/petrel-mq/petrel/internal/fielddoc"
)

func main() {
	typeName := flag.String("type", "", "the struct type whose fields are described")
	varName := flag.String("var", "", "the variable the generated file declares")
	out := flag.String("o", "", "the file to write")
	flag.Parse()
	if *typeName == "" || *varName == "" || *out == "" || flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: fielddoc -type T -var v -o out.go source.go")
		os.Exit(2)
	}
	pkg := os.Getenv("GOPACKAGE")
	if pkg == "" {
		fmt.Fprintln(os.Stderr, "fielddoc: GOPACKAGE is not set: run it from go generate")
		os.Exit(2)
	}
	src, err := fielddoc.Generate(flag.Arg(0), *typeName, pkg, *varName)
	if err == nil {
		err = os.WriteFile(*out, src, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fielddoc:", err)
		os.Exit(1)
	}
}
