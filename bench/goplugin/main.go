// A minimal Go device plugin, the yardstick for devplugd's start and exit
// benchmarks: what a vendor writes with the kubelet's own Go API and grpc-go.
// It serves `-count` shares of one device node as one extended resource on
// its own socket, registers with kubelet.sock, registers again when the
// kubelet makes kubelet.sock anew (watched with fsnotify, that is inotify),
// and on SIGTERM stops its server, removes its socket and exits, as Go
// device plugins commonly do.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	devices []*pluginapi.Device
	node    string
	stop    chan struct{}
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *plugin) ListAndWatch(_ *pluginapi.Empty, s pluginapi.DevicePlugin_ListAndWatchServer) error {
	if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices}); err != nil {
		return err
	}
	<-p.stop
	return nil
}

func (p *plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for range req.ContainerRequests {
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Devices: []*pluginapi.DeviceSpec{{HostPath: p.node, ContainerPath: p.node, Permissions: "rw"}},
		})
	}
	return resp, nil
}

func main() {
	dir := flag.String("dir", pluginapi.DevicePluginPath, "the kubelet's device-plugins folder")
	resource := flag.String("resource", "bench.example/go", "extended resource name")
	node := flag.String("node", "/dev/kvm", "device node every share hands out")
	count := flag.Int("count", 110, "shares of the node")
	flag.Parse()

	p := &plugin{node: *node, stop: make(chan struct{})}
	for i := 0; i < *count; i++ {
		p.devices = append(p.devices, &pluginapi.Device{ID: fmt.Sprintf("go-%d", i), Health: pluginapi.Healthy})
	}
	endpoint := "go-bench.sock"
	sock := filepath.Join(*dir, endpoint)
	_ = os.Remove(sock)
	lis, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	server := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(server, p)
	go func() { _ = server.Serve(lis) }()

	kubelet := filepath.Join(*dir, "kubelet.sock")
	register := func() error {
		conn, err := grpc.NewClient("unix://"+kubelet,
			grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
			Version: pluginapi.Version, Endpoint: endpoint, ResourceName: *resource,
		})
		return err
	}
	// A kubelet that restarts makes kubelet.sock anew and forgets every
	// plugin: register again when it appears.
	watcher, err := fsnotify.NewWatcher()
	if err == nil {
		err = watcher.Add(*dir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "watch:", err)
		os.Exit(1)
	}
	defer watcher.Close()
	if err := register(); err != nil {
		fmt.Fprintln(os.Stderr, "register:", err)
		os.Exit(1)
	}
	go func() {
		for ev := range watcher.Events {
			if ev.Name == kubelet && ev.Op.Has(fsnotify.Create) {
				if err := register(); err != nil {
					fmt.Fprintln(os.Stderr, "register:", err)
				}
			}
		}
	}()

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	<-sigs
	close(p.stop)
	server.Stop()
	_ = os.Remove(sock)
}
