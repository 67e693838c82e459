package kubernetes

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
)

// node stands in for one Kubernetes node: a loopback address as its
// status.hostIP, a directory as its root for hostPath volumes, and a free UDP
// port in place of 4791 (which rdma_rxe or another test may hold).
type node struct {
	addr netip.Addr
	root string
	port uint16
}

// newNode picks a 127.x.y.z address whose UDP port and the TCP ports roced's
// args name are free.
func newNode(t *testing.T, tcpPorts []int) node {
	t.Helper()
	for range 20 {
		a := netip.AddrFrom4([4]byte{127, byte(64 + rand.IntN(128)), byte(1 + rand.IntN(250)), byte(1 + rand.IntN(250))})
		u, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, 0)))
		if err != nil {
			t.Fatal(err)
		}
		port := uint16(u.LocalAddr().(*net.UDPAddr).Port)
		u.Close()
		free := true
		for _, p := range tcpPorts {
			l, err := net.Listen("tcp", netip.AddrPortFrom(a, uint16(p)).String())
			if err != nil {
				free = false
				break
			}
			l.Close()
		}
		if free {
			return node{addr: a, root: t.TempDir(), port: port}
		}
	}
	t.Fatal("no loopback address with free ports in 20 tries")
	return node{}
}

// path maps a path inside c to the node directory its hostPath volume
// shows, unchanged when no hostPath volume holds it.
func (n node) path(c container, p string) string {
	if h := c.hostFile(p); h != "" {
		return filepath.Join(n.root, h)
	}
	return p
}

// args are c's args as the kubelet passes them on this node, with every
// path on a hostPath volume moved under the node's root and the node's
// loopback address for 127.0.0.1.
func (n node) args(t *testing.T, c container) []string {
	t.Helper()
	args := expandArgs(t, c, n.addr.String())
	for i, a := range args {
		name, val, ok := strings.Cut(a, "=")
		if !ok {
			name, val = "", a
		}
		val = strings.ReplaceAll(n.path(c, val), "127.0.0.1:", n.addr.String()+":")
		if ok {
			args[i] = name + "=" + val
		} else {
			args[i] = val
		}
	}
	return args
}

// TestNode runs the manifests' commands as the kubelet would on one node:
// roced with the DaemonSet's args (its socket group the test's own group,
// which the pods' security contexts arrange in a cluster), ready by its
// readiness probe, then the example client with its args and env, which must
// attach through the socket on the shared directory and pass its validated
// pings; then roced stops on SIGTERM within the pod's grace period.
func TestNode(t *testing.T) {
	objs := loadManifests(t, ".")
	var ds *appsv1.DaemonSet
	for _, o := range objs {
		if d, ok := o.obj.(*appsv1.DaemonSet); ok {
			ds = d
		}
	}
	cs := containersOf(podsOf(objs))
	var roced, client container
	for _, c := range cs {
		switch c.tool() {
		case "roced":
			roced = c
		case "rping-go":
			client = c
		}
	}
	if ds == nil || roced.c == nil || client.c == nil {
		t.Fatal("the manifests have no roced DaemonSet or no rping-go client")
	}
	var tcp []int
	for _, p := range roced.c.Ports {
		if p.Protocol == "TCP" {
			tcp = append(tcp, int(p.ContainerPort))
		}
	}
	n := newNode(t, tcp)
	bin := buildTools(t, "roced", "rping-go")

	args := n.args(t, roced)
	for i, a := range args {
		if strings.HasPrefix(a, "-socket-group=") {
			args[i] = "-socket-group=" + strconv.Itoa(os.Getgid())
		}
	}
	args = append(args, fmt.Sprintf("-port=%d", n.port))
	for _, m := range roced.c.VolumeMounts {
		if err := os.MkdirAll(n.path(roced, m.MountPath), 0o755); err != nil { // the kubelet's DirectoryOrCreate
			t.Fatal(err)
		}
	}
	var log bytes.Buffer
	rd := exec.Command(filepath.Join(bin, "roced"), args...)
	rd.Stderr, rd.Stdout = &log, &log
	if err := rd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- rd.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			rd.Process.Kill() // by its pid: only the roced this test started
			<-exited
		}
		if t.Failed() {
			t.Logf("roced %s:\n%s", strings.Join(args, " "), log.String())
		}
	}()

	// The readiness probe, as the kubelet runs it on the pod's IP (the node's).
	probe := roced.c.ReadinessProbe.HTTPGet
	url := fmt.Sprintf("http://%s%s", netip.AddrPortFrom(n.addr, uint16(namedPort(t, roced, probe.Port.String()))), probe.Path)
	if gone, err := waitReady(url, exited); err != nil {
		stopped = gone
		t.Fatal(err)
	}

	cargs := append(n.args(t, client), "--udp-port", strconv.Itoa(int(n.port)))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := exec.CommandContext(ctx, filepath.Join(bin, "rping-go"), cargs...)
	cl.Env = os.Environ()
	for _, e := range client.c.Env {
		if e.ValueFrom == nil {
			cl.Env = append(cl.Env, e.Name+"="+n.path(client, e.Value))
		}
	}
	out, err := cl.CombinedOutput()
	if err != nil {
		t.Fatalf("rping-go %s: %v\n%s", strings.Join(cargs, " "), err, out)
	}
	count := client.c.Args[slices.Index(client.c.Args, "-C")+1]
	if got := strconv.Itoa(strings.Count(string(out), "ping data: rdma-ping-")); got != count {
		t.Errorf("rping-go printed %s validated pings, want %s:\n%s", got, count, out)
	}
	grace := time.Duration(*ds.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second
	if err := rd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			t.Errorf("roced after SIGTERM: %v", err)
		}
		// Read once roced is gone: it writes the log until then.
		if !strings.Contains(log.String(), `"msg":"attached"`) {
			t.Errorf("roced logged no attach: the client did not share the node's address through roced")
		}
	case <-time.After(grace):
		t.Errorf("roced still runs %v after SIGTERM, the pod's terminationGracePeriodSeconds", grace)
	}
}

// namedPort is the number of c's port called name.
func namedPort(t *testing.T, c container, name string) int32 {
	t.Helper()
	for _, p := range c.c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Fatalf("%v has no port %q", c, name)
	return 0
}

// waitReady polls url until it answers 200, roced exits (gone), or 30 s pass
// (a start on a loaded host; roced binds its sockets in well under a second).
func waitReady(url string, exited <-chan error) (gone bool, err error) {
	cl := &http.Client{Timeout: time.Second}
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if resp, err := cl.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return false, nil
			}
		}
		select {
		case err := <-exited:
			return true, fmt.Errorf("roced exited before %s answered 200: %v", url, err)
		case <-deadline:
			return false, fmt.Errorf("%s did not answer 200 within 30s", url)
		case <-tick.C:
		}
	}
}
