// Package apiclient is what the Go floors of the benchmarks share: the flags naming the sandbox's
// apiserver and its TLS material (bench/lib.ts goClientArgs writes them), and a plain net/http
// client for it. No client library: a floor does the necessary work and nothing else.
package apiclient

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"log"
	"net/http"
	"os"
)

var (
	// Server is the apiserver's URL, without a trailing slash.
	Server = flag.String("server", "", "apiserver URL")
	caFile = flag.String("ca", "", "CA file")
	cert   = flag.String("cert", "", "client certificate file")
	key    = flag.String("key", "", "client key file")
)

// New returns a client of the apiserver that keeps up to idle connections open. Call it after
// flag.Parse.
func New(idle int) *http.Client {
	ca, err := os.ReadFile(*caFile)
	if err != nil {
		log.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(*cert, *key)
	if err != nil {
		log.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}},
		MaxIdleConnsPerHost: idle,
	}}
}
