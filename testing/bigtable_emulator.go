// Command bttest serves Google's in-memory Cloud Bigtable emulator
// (cloud.google.com/go/bigtable/bttest) on a TCP address, for tests.
//
// Build (see setup.sh):
//
//	GO111MODULE=off GOPATH=/usr/share/gocode go build -o .bin/bttest testing/bigtable_emulator.go
//
// It prints one line "bttest: serving on HOST:PORT" on stdout once the
// listener is open (with -port 0 that line names the port the kernel chose),
// then serves until SIGINT or SIGTERM. All data lives in memory and is lost on
// exit; project and instance names are accepted as given.
package main

import (
	"flag"
	"fmt"
	"log"
	"math"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"cloud.google.com/go/bigtable/bttest"
	"google.golang.org/grpc"
)

func main() {
	host := flag.String("host", "127.0.0.1", "address to listen on")
	port := flag.Int("port", 0, "port to listen on; 0 picks a free one")
	flag.Parse()

	// Same message limits as gcloud's emulator, so large bulk mutations and
	// wide rows behave alike whichever emulator the tests get.
	srv, err := bttest.NewServer(
		net.JoinHostPort(*host, strconv.Itoa(*port)),
		grpc.MaxRecvMsgSize(math.MaxInt32),
		grpc.MaxSendMsgSize(math.MaxInt32),
	)
	if err != nil {
		log.Fatalf("bttest: failed to start: %v", err)
	}
	// The readiness line: launchers wait for it and parse the address.
	fmt.Printf("bttest: serving on %s\n", srv.Addr)
	os.Stdout.Sync()

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	<-stop
	srv.Close()
}
