// A loopback load generator for Berth's admission webhook server, built and run by
// bench/webhook.ts. It calls the server the way the apiserver does: Go's HTTP/1.1 client over
// TLS with client-go's transport settings (25 idle connections per host, a 10 s handshake
// timeout), one goroutine per concurrent caller sending reviews back to back. Slow clients (slow
// request headers, slow bodies) can run beside them; for each it measures when the server
// dropped it. The last line on stdout is one JSON object.
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"sync"
	"time"
)

type summary struct {
	Count int     `json:"count"`
	P50Ms float64 `json:"p50Ms"`
	P99Ms float64 `json:"p99Ms"`
	MaxMs float64 `json:"maxMs"`
}

func summarize(ms []float64) summary {
	if len(ms) == 0 {
		return summary{}
	}
	sort.Float64s(ms)
	at := func(p float64) float64 {
		i := int(p/100*float64(len(ms))+0.999999) - 1
		return round(ms[max(0, min(len(ms)-1, i))])
	}
	return summary{Count: len(ms), P50Ms: at(50), P99Ms: at(99), MaxMs: round(ms[len(ms)-1])}
}

func round(v float64) float64 { return float64(int64(v*10+0.5)) / 10 }

type slowResult struct {
	Started    int     `json:"started"`
	Refused    int     `json:"refused"`
	Dropped    int     `json:"dropped"`
	NotDropped int     `json:"notDropped"`
	MaxDropS   float64 `json:"maxDropS"`
}

func main() {
	target := flag.String("url", "", "webhook URL")
	caFile := flag.String("ca", "", "PEM file of the CA that signed the serving certificate")
	bodyFile := flag.String("body", "", "file holding the AdmissionReview to send")
	clients := flag.Int("clients", 500, "concurrent callers")
	duration := flag.Duration("duration", 15*time.Second, "how long the callers send")
	idle := flag.Int("idle", 25, "idle connections kept per host (client-go's default)")
	timeout := flag.Duration("timeout", 10*time.Second, "a call still unanswered after this counts as timed out")
	deadline := flag.Duration("deadline", 2*time.Second, "the webhook's timeoutSeconds: answers after it count as late")
	slowHeaders := flag.Int("slow-headers", 0, "connections sending request headers one line per -slow-every")
	slowBodies := flag.Int("slow-bodies", 0, "connections sending a body one byte per -slow-every")
	slowEvery := flag.Duration("slow-every", time.Second, "")
	slowMax := flag.Duration("slow-max", 30*time.Second, "a slow connection still open after this counts as not dropped")
	progress := flag.Bool("progress", false, "print each second's answers on stderr")
	flag.Parse()

	ca, err := os.ReadFile(*caFile)
	check(err)
	body, err := os.ReadFile(*bodyFile)
	check(err)
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		check(errors.New("no certificate in " + *caFile))
	}
	tlsConfig := &tls.Config{RootCAs: roots}
	u, err := url.Parse(*target)
	check(err)

	var slowWait sync.WaitGroup
	slow := map[string]*slowResult{"headers": {}, "bodies": {}}
	var slowMu sync.Mutex
	for kind, n := range map[string]int{"headers": *slowHeaders, "bodies": *slowBodies} {
		for range n {
			slowWait.Add(1)
			go func() {
				defer slowWait.Done()
				dropped, refused := slowClient(u, tlsConfig, kind, *slowEvery, *slowMax)
				slowMu.Lock()
				defer slowMu.Unlock()
				r := slow[kind]
				r.Started++
				switch {
				case refused:
					r.Refused++
				case dropped > 0:
					r.Dropped++
					r.MaxDropS = max(r.MaxDropS, round(dropped.Seconds()))
				default:
					r.NotDropped++
				}
			}()
		}
	}

	client := &http.Client{
		Timeout: *timeout,
		Transport: &http.Transport{
			TLSClientConfig:     tlsConfig,
			TLSHandshakeTimeout: 10 * time.Second,
			MaxIdleConnsPerHost: *idle,
			IdleConnTimeout:     90 * time.Second,
		},
	}
	var mu sync.Mutex
	var answered, refused []float64
	perSecond := map[int][]float64{}
	codes := map[string]int{}
	timeouts := 0
	began := time.Now()
	end := began.Add(*duration)
	var wg sync.WaitGroup
	for range *clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				start := time.Now()
				code, err := call(client, *target, body)
				ms := float64(time.Since(start).Microseconds()) / 1000
				mu.Lock()
				var ne net.Error
				switch {
				case err != nil && errors.As(err, &ne) && ne.Timeout():
					timeouts++
				case err != nil:
					codes["connection"]++
					refused = append(refused, ms)
				case code == http.StatusOK:
					answered = append(answered, ms)
					second := int(start.Sub(began).Seconds())
					perSecond[second] = append(perSecond[second], ms)
				default:
					codes[fmt.Sprint(code)]++
					refused = append(refused, ms)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(began).Seconds()
	if *progress {
		for second := range int(elapsed) + 1 {
			s := summarize(perSecond[second])
			fmt.Fprintf(os.Stderr, "  calls started in second %d: %d answered, p50 %.0f ms, p99 %.0f ms, max %.0f ms\n", second, s.Count, s.P50Ms, s.P99Ms, s.MaxMs)
		}
	}
	slowWait.Wait()

	late := 0
	for _, ms := range answered {
		if ms > float64(deadline.Milliseconds()) {
			late++
		}
	}
	out, err := json.Marshal(map[string]any{
		"clients":     *clients,
		"seconds":     round(elapsed),
		"perSecond":   int(float64(len(answered)) / elapsed),
		"answered":    summarize(answered),
		"late":        late,
		"refused":     summarize(refused),
		"refusedBy":   codes,
		"timeouts":    timeouts,
		"slowHeaders": slow["headers"],
		"slowBodies":  slow["bodies"],
	})
	check(err)
	fmt.Println(string(out))
}

func call(client *http.Client, target string, body []byte) (int, error) {
	resp, err := client.Post(target, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, err
}

// slowClient opens one TLS connection and sends a request slowly, one line of headers or one byte
// of body per `every`, until the server closes the connection or `limit` passes. It returns how
// long after the TLS handshake the server dropped it (0: it did not), or refused when it could not
// even connect.
func slowClient(u *url.URL, config *tls.Config, kind string, every, limit time.Duration) (time.Duration, bool) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: limit}, "tcp", u.Host, config)
	if err != nil {
		return 0, true
	}
	start := time.Now()
	defer conn.Close()
	closed := make(chan struct{})
	go func() {
		// Whatever the server answers (a 408 at most), the connection ends when it closes it.
		_, _ = io.Copy(io.Discard, conn)
		close(closed)
	}()
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n", u.RequestURI(), u.Host)
	if kind == "bodies" {
		head += "Content-Length: 100000\r\n\r\n"
	}
	if _, err := conn.Write([]byte(head)); err != nil {
		return time.Since(start), false
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	stop := time.After(limit)
	for {
		select {
		case <-closed:
			return time.Since(start), false
		case <-stop:
			return 0, false
		case <-tick.C:
			piece := "X-Slow: 1\r\n"
			if kind == "bodies" {
				piece = " "
			}
			// A failed write means the server is gone; the reader sees it too.
			_, _ = conn.Write([]byte(piece))
		}
	}
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "webhookload:", err)
		os.Exit(1)
	}
}
