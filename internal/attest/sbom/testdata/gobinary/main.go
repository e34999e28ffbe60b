// Command gobinary is a small Go program with a module dependency, built by
// the tests to have a binary with real build information.
package main

import (
	"fmt"

	cdx "github.com/CycloneDX/cyclonedx-go"
)

func main() { fmt.Println(cdx.SpecVersion1_6) }
