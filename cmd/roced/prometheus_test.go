package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testsupport/syncbuf"
	"github.com/goroce/goroce/roce"
)

// needTool returns the path of a Prometheus tool (from the Debian package
// `prometheus`). Without it the test skips, except under CI=true, where the test
// script installs it (cmd/roced/testdata/install-prometheus.sh) and its absence is a
// failure.
func needTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s not installed (CI=true): run cmd/roced/testdata/install-prometheus.sh", name)
		}
		t.Skipf("%s not installed; run cmd/roced/testdata/install-prometheus.sh", name)
	}
	return p
}

// TestPromtoolCheckMetrics: `promtool check metrics` finds nothing to complain about in
// the exposition of a daemon that has seen traffic.
func TestPromtoolCheckMetrics(t *testing.T) {
	promtool := needTool(t, "promtool")
	addrs := testAddrs(2)
	port := freeUDPPort(t, addrs...)
	p := startDaemon(t, "-bind", addrs[0].String(), "-port", strconv.Itoa(int(port)), "-pingpong=false")
	pkts, _, _ := junk(rand.New(rand.NewPCG(5, 6)), 30)
	sendDatagrams(t, addrs[1], netip.AddrPortFrom(addrs[0], port), pkts)

	_, body := httpGet(t, "http://"+p.metrics+"/metrics")
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) != 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// prometheusServer is a prometheus process a test started on 127.0.0.1.
type prometheusServer struct {
	url string
	cmd *exec.Cmd
	log *syncbuf.Buffer
}

func freeTCPAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startPrometheus runs prometheus with a temporary config that scrapes target every
// second, and a temporary data directory. Cleanup kills that PID only.
func startPrometheus(t *testing.T, target string) *prometheusServer {
	t.Helper()
	bin := needTool(t, "prometheus")
	dir := t.TempDir()
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: roced
    scrape_interval: 1s
    static_configs:
      - targets: [%q]
`, target)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	listen := freeTCPAddr(t)
	s := &prometheusServer{url: "http://" + listen, log: &syncbuf.Buffer{}}
	s.cmd = exec.Command(bin,
		"--config.file="+cfgPath,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+listen,
		"--log.level=warn",
	)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = s.cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("prometheus log:\n%s", s.log.String())
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-done:
			t.Fatalf("prometheus exited early:\n%s", s.log.String())
		default:
		}
		if code, _ := tryGet(s.url + "/-/ready"); code == 200 {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready after 60s:\n%s", s.log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func tryGet(u string) (int, []byte) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(u)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.Bytes()
}

// queryResult is the part of a /api/v1/query answer the tests read.
type queryResult struct {
	Status string `json:"status"`
	Error  string `json:"error"`
	Data   struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		} `json:"result"`
	} `json:"data"`
}

func (s *prometheusServer) query(t *testing.T, q string) queryResult {
	t.Helper()
	code, body := tryGet(s.url + "/api/v1/query?query=" + url.QueryEscape(q))
	var r queryResult
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("query %q: HTTP %d: %s", q, code, body)
	}
	return r
}

// waitValue polls the query until it returns exactly one series with value want (from
// instance inst), for up to 30 s: scrapes run every second.
func (s *prometheusServer) waitValue(t *testing.T, q string, want int, inst string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last queryResult
	for {
		last = s.query(t, q)
		if last.Status == "success" && len(last.Data.Result) == 1 {
			if v, _ := last.Data.Result[0].Value[1].(string); v == strconv.Itoa(want) {
				if got := last.Data.Result[0].Metric["instance"]; got != inst {
					t.Errorf("%s: instance label = %q, want %q", q, got, inst)
				}
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("query %s never returned %d; last answer: %+v", q, want, last)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// TestPrometheusEndToEnd: a real Prometheus server scrapes roced and answers PromQL
// with the exact number of datagrams and RC packets the test sent; every query of the Grafana
// dashboard is valid PromQL against real data.
func TestPrometheusEndToEnd(t *testing.T) {
	needTool(t, "prometheus")
	addrs := testAddrs(2)
	port := freeUDPPort(t, addrs...)
	_, tcpPort, _ := net.SplitHostPort(freeTCPAddr(t))
	p := startDaemon(t, "-bind", addrs[0].String(), "-port", strconv.Itoa(int(port)), "-ud-pingpong=false", "-pingpong-port", tcpPort)
	prom := startPrometheus(t, p.metrics)

	const n = 37
	pkts := make([][]byte, n)
	for i := range pkts {
		pkts[i] = []byte{byte(i)} // one byte: shorter than any BTH, so malformed
	}
	sendDatagrams(t, addrs[1], netip.AddrPortFrom(addrs[0], port), pkts)

	prom.waitValue(t, `roce_malformed_packets_total{job="roced"}`, n, p.metrics)

	// A known RC exchange through the pingpong responder: 20 messages of 4096 bytes
	// each way, 4 packets each at MTU 1024.
	dev, err := roce.Open(addrs[1], roce.WithPort(port), roce.WithMTU(roce.MTU1024))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	c := newPPClient(t, dev, kindRC, 1, 4096)
	c.exchange(net.JoinHostPort(addrs[0].String(), tcpPort))
	c.run(20)
	// Under load a timer may fire before an ACK arrives: each side's resends
	// are counted as packets too, and by the sender as retransmits and the
	// receiver as duplicates (or, past a gap, out of sequence). What each
	// side moved once is exact; only send packets flow here.
	prom.waitValue(t, `roce_packets_total{job="roced",direction="rx",op_class="send"}`+
		` - ignoring(direction, op_class) roce_duplicate_requests_total{job="roced"}`+
		` - ignoring(direction, op_class) roce_out_of_sequence_total{job="roced"}`, 80, p.metrics)
	prom.waitValue(t, `roce_packets_total{job="roced",direction="tx",op_class="send"}`+
		` - ignoring(direction, op_class) roce_retransmits_total{job="roced"}`, 80, p.metrics)
	prom.waitValue(t, `roce_pingpong_messages_total{job="roced",kind="rc"}`, 20, p.metrics)

	up := prom.query(t, `up{job="roced"}`)
	if len(up.Data.Result) != 1 || up.Data.Result[0].Value[1] != "1" {
		t.Errorf("up{job=\"roced\"} = %+v", up.Data.Result)
	}

	// Every dashboard query must be valid PromQL over what roced exports.
	exprs := dashboardExprs(t)
	if len(exprs) < 10 {
		t.Fatalf("only %d queries found in the dashboard", len(exprs))
	}
	r := strings.NewReplacer("$__rate_interval", "1m", "$job", "roced", "$instance", ".*")
	for _, e := range exprs {
		res := prom.query(t, r.Replace(e))
		if res.Status != "success" {
			t.Errorf("dashboard query %q: %s", e, res.Error)
		}
	}
}

// dashboardExprs returns every PromQL expression in deploy/grafana-dashboard.json.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	var out []string
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			out = append(out, tg.Expr)
		}
	}
	return out
}
