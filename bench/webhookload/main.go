// A loopback load generator for admission webhook servers, built and run by bench/webhook.ts,
// bench/gates.ts and bench/arch.ts. It calls a server the way the apiserver calls Berth's: Go's HTTP/1.1 client over TLS with
// client-go's transport settings (25 idle connections per host, a 10 s handshake timeout). The
// apiserver's client also offers h2 by ALPN, which `node:https` does not accept (Go's net/http
// does): -h2 offers it too, for bench/webhookprotocols.ts (decision 0023). Two
// modes: one goroutine per concurrent caller sending reviews back to back (-clients), or reviews at
// a constant rate (-rate), open-loop, to one or more servers taking turns. Slow clients (slow
// request headers, slow bodies) can run beside the callers; for each it measures when the server
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
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
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

func round(v float64) float64 { return math.Round(v*100) / 100 }

// tally collects the outcomes of calls: the latency of each answered or refused, refusals by
// cause, timeouts.
type tally struct {
	mu        sync.Mutex
	began     time.Time
	answered  []float64
	refused   []float64
	perSecond map[int][]float64
	codes     map[string]int
	timeouts  int
}

func newTally() *tally {
	return &tally{began: time.Now(), perSecond: map[int][]float64{}, codes: map[string]int{}}
}

func (t *tally) record(start time.Time, code int, err error) {
	ms := float64(time.Since(start).Microseconds()) / 1000
	t.mu.Lock()
	defer t.mu.Unlock()
	var ne net.Error
	switch {
	case err != nil && errors.As(err, &ne) && ne.Timeout():
		t.timeouts++
	case err != nil:
		t.codes["connection"]++
		t.refused = append(t.refused, ms)
	case code == http.StatusOK:
		t.answered = append(t.answered, ms)
		second := int(start.Sub(t.began).Seconds())
		t.perSecond[second] = append(t.perSecond[second], ms)
	default:
		t.codes[fmt.Sprint(code)]++
		t.refused = append(t.refused, ms)
	}
}

// figures are what both modes report of a tally: answers per second over `seconds`, latencies,
// answers after `deadline` (late), refusals and timeouts.
func (t *tally) figures(seconds float64, deadline time.Duration) map[string]any {
	late := 0
	for _, ms := range t.answered {
		if ms > float64(deadline.Milliseconds()) {
			late++
		}
	}
	return map[string]any{
		"perSecond": int(float64(len(t.answered)) / seconds),
		"answered":  summarize(t.answered),
		"late":      late,
		"refused":   summarize(t.refused),
		"refusedBy": t.codes,
		"timeouts":  t.timeouts,
	}
}

// repeated is a flag that may be given more than once.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ",") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

type slowResult struct {
	Started    int     `json:"started"`
	Refused    int     `json:"refused"`
	Dropped    int     `json:"dropped"`
	NotDropped int     `json:"notDropped"`
	MaxDropS   float64 `json:"maxDropS"`
}

func main() {
	var targets, bodyFiles repeated
	flag.Var(&targets, "url", "webhook URL; with -rate it may be given more than once")
	caFile := flag.String("ca", "", "PEM file of the CAs that signed the serving certificates")
	certFile := flag.String("cert", "", "client certificate (PEM) to present, as the apiserver presents its own to webhooks")
	keyFile := flag.String("key", "", "its private key (PEM)")
	flag.Var(&bodyFiles, "body", "file holding an AdmissionReview to send; with -rate, more than one are sent in turn")
	clients := flag.Int("clients", 500, "concurrent callers")
	rate := flag.Float64("rate", 0, "reviews per second to each URL, sent open-loop instead of by -clients callers")
	slice := flag.Duration("slice", time.Second, "with -rate, how long each URL's turn lasts")
	warmup := flag.Int("warmup", 50, "with -rate, untimed calls to each URL first")
	duration := flag.Duration("duration", 15*time.Second, "how long the callers send (with -rate: to each URL)")
	idle := flag.Int("idle", 25, "idle connections kept per host (client-go's default)")
	timeout := flag.Duration("timeout", 10*time.Second, "a call still unanswered after this counts as timed out")
	deadline := flag.Duration("deadline", 2*time.Second, "the webhook's timeoutSeconds: answers after it count as late")
	slowHeaders := flag.Int("slow-headers", 0, "connections sending request headers one line per -slow-every")
	slowBodies := flag.Int("slow-bodies", 0, "connections sending a body one byte per -slow-every")
	slowEvery := flag.Duration("slow-every", time.Second, "")
	slowMax := flag.Duration("slow-max", 30*time.Second, "a slow connection still open after this counts as not dropped")
	progress := flag.Bool("progress", false, "print each second's answers on stderr")
	h2 := flag.Bool("h2", false, "offer HTTP/2 by ALPN, as the apiserver's webhook client does (client-go's transport): a server that accepts it is called over one multiplexed connection")
	flag.Parse()

	ca, err := os.ReadFile(*caFile)
	check(err)
	var bodies [][]byte
	for _, f := range bodyFiles {
		body, err := os.ReadFile(f)
		check(err)
		bodies = append(bodies, body)
	}
	if len(targets) == 0 || len(bodies) == 0 {
		check(errors.New("-url and -body are required"))
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		check(errors.New("no certificate in " + *caFile))
	}
	tlsConfig := &tls.Config{RootCAs: roots}
	if *certFile != "" {
		pair, err := tls.LoadX509KeyPair(*certFile, *keyFile)
		check(err)
		tlsConfig.Certificates = []tls.Certificate{pair}
	}
	client := &http.Client{
		Timeout: *timeout,
		Transport: &http.Transport{
			TLSClientConfig:     tlsConfig,
			TLSHandshakeTimeout: 10 * time.Second,
			MaxIdleConnsPerHost: *idle,
			IdleConnTimeout:     90 * time.Second,
			ForceAttemptHTTP2:   *h2,
		},
	}
	if *rate > 0 {
		atRate(client, targets, bodies, *rate, *duration, *slice, *warmup, *deadline)
		return
	}
	if len(targets) != 1 || len(bodies) != 1 {
		check(errors.New("-clients callers send one -body to one -url"))
	}
	target, body := targets[0], bodies[0]
	u, err := url.Parse(target)
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

	calls := newTally()
	end := calls.began.Add(*duration)
	var wg sync.WaitGroup
	for range *clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				start := time.Now()
				_, code, _, err := call(client, target, body)
				calls.record(start, code, err)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(calls.began).Seconds()
	if *progress {
		for second := range int(elapsed) + 1 {
			s := summarize(calls.perSecond[second])
			fmt.Fprintf(os.Stderr, "  calls started in second %d: %d answered, p50 %.0f ms, p99 %.0f ms, max %.0f ms\n", second, s.Count, s.P50Ms, s.P99Ms, s.MaxMs)
		}
	}
	slowWait.Wait()

	result := calls.figures(elapsed, *deadline)
	result["clients"] = *clients
	result["seconds"] = round(elapsed)
	result["slowHeaders"] = slow["headers"]
	result["slowBodies"] = slow["bodies"]
	out, err := json.Marshal(result)
	check(err)
	fmt.Println(string(out))
}

// atRate sends reviews to each target at `rate` per second for `each`, the targets taking turns of
// `slice`, and prints each target's figures and its answers to the bodies. Open-loop: a call goes
// out when it is due, whether or not the ones before it were answered, as the apiserver's reviews
// arrive whatever the webhook's pace; a slow answer cannot hold back (and so hide) the next calls.
// Every target gets `warmup` untimed calls first: its connections and code paths are warm.
func atRate(client *http.Client, targets []string, bodies [][]byte, rate float64, each, slice time.Duration, warmup int, deadline time.Duration) {
	answers := make([][]string, len(targets))
	protocols := make([]string, len(targets))
	for t, target := range targets {
		answers[t] = make([]string, len(bodies))
		for i := range max(warmup, len(bodies)) {
			answer, code, protocol, err := call(client, target, bodies[i%len(bodies)])
			check(err)
			protocols[t] = protocol
			if code != http.StatusOK {
				check(fmt.Errorf("%s answered %d: %s", target, code, answer))
			}
			if i < len(bodies) {
				answers[t][i] = string(answer)
			}
		}
	}
	tallies := make([]*tally, len(targets))
	for t := range targets {
		tallies[t] = newTally()
	}
	perTarget := int(rate * each.Seconds())
	perSlice := max(1, int(rate*slice.Seconds()))
	interval := time.Duration(float64(time.Second) / rate)
	began := time.Now()
	due := began
	var wg sync.WaitGroup
	for from := 0; from < perTarget; from += perSlice {
		for t, target := range targets {
			for i := from; i < min(from+perSlice, perTarget); i++ {
				time.Sleep(time.Until(due))
				due = due.Add(interval)
				wg.Add(1)
				go func() {
					defer wg.Done()
					start := time.Now()
					_, code, _, err := call(client, target, bodies[i%len(bodies)])
					tallies[t].record(start, code, err)
				}()
			}
		}
	}
	sending := time.Since(began).Seconds()
	wg.Wait()
	results := make([]map[string]any, len(targets))
	for t, target := range targets {
		// Each target had its share of the sending time.
		results[t] = tallies[t].figures(sending/float64(len(targets)), deadline)
		results[t]["url"] = target
		results[t]["answers"] = answers[t]
		results[t]["protocol"] = protocols[t]
	}
	out, err := json.Marshal(map[string]any{
		"rate":          rate,
		"sentPerSecond": round(float64(perTarget*len(targets)) / sending),
		"targets":       results,
	})
	check(err)
	fmt.Println(string(out))
}

// call posts one review; the answer's body, status and protocol (HTTP/1.1 or HTTP/2.0).
func call(client *http.Client, target string, body []byte) ([]byte, int, string, error) {
	resp, err := client.Post(target, "application/json", bytes.NewReader(body))
	if err != nil {
		return nil, 0, "", err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	return answer, resp.StatusCode, resp.Proto, err
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
