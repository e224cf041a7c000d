// Berth's registry command: CNCF distribution's registry with only what the sandbox uses, the
// filesystem storage driver and token auth. Upstream's cmd/registry also links the Azure, GCS and
// S3 drivers (374 of its 792 packages), which would double the cold build for nothing.
package main

import (
	"os"

	"github.com/distribution/distribution/v3/registry"
	_ "github.com/distribution/distribution/v3/registry/auth/token"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
)

func main() {
	if err := registry.RootCmd.Execute(); err != nil {
		os.Exit(1)
	}
}
