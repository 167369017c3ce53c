// Command probe is the test image of the real node: one static binary, no shell, no libc,
// so the image is a single file built from source (no registry).
//
//	probe echo WORD...   print the words and exit 0
//	probe env NAME...    print NAME=value for each variable set, in order; exit 1 if one is not
//	probe serve PORT     answer every HTTP request with "probe <hostname>"
//	probe fetch URL      GET URL (retrying until -timeout), print the body; exit 1 on failure
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: probe echo WORD... | env NAME... | serve PORT | fetch [-timeout D] URL")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "echo":
		fmt.Println(strings.Join(os.Args[2:], " "))
	case "env":
		code := 0
		for _, name := range os.Args[2:] {
			if value, ok := os.LookupEnv(name); ok {
				fmt.Printf("%s=%s\n", name, value)
			} else {
				fmt.Printf("%s is not set\n", name)
				code = 1
			}
		}
		os.Exit(code)
	case "serve":
		if len(os.Args) != 3 {
			fmt.Fprintln(os.Stderr, "usage: probe serve PORT")
			os.Exit(2)
		}
		serve(os.Args[2])
	case "fetch":
		fs := flag.NewFlagSet("fetch", flag.ExitOnError)
		timeout := fs.Duration("timeout", 60*time.Second, "give up after this long")
		_ = fs.Parse(os.Args[2:])
		if fs.NArg() != 1 {
			fmt.Fprintln(os.Stderr, "usage: probe fetch [-timeout D] URL")
			os.Exit(2)
		}
		if err := fetch(fs.Arg(0), *timeout); err != nil {
			fmt.Fprintln(os.Stderr, "fetch:", err)
			os.Exit(1)
		}
	default:
		fmt.Fprintf(os.Stderr, "probe: unknown command %q (echo, env, serve, fetch)\n", os.Args[1])
		os.Exit(2)
	}
}

func serve(port string) {
	host, _ := os.Hostname()
	http.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "probe %s\n", host)
	})
	fmt.Println("serving on :" + port)
	// A pod's PID 1 gets no default SIGTERM handler; exiting on it keeps deletes fast.
	go exitOnTerm()
	if err := http.ListenAndServe(":"+port, nil); err != nil {
		fmt.Fprintln(os.Stderr, "serve:", err)
		os.Exit(1)
	}
}

// fetch retries because a fresh Service's endpoints and DNS record appear a little after
// the pod that asks for them starts.
func fetch(url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	client := &http.Client{Timeout: 5 * time.Second}
	var last error
	for {
		body, err := get(ctx, client, url)
		if err == nil {
			fmt.Print(body)
			return nil
		}
		last = err
		fmt.Fprintln(os.Stderr, "retrying:", err)
		select {
		case <-ctx.Done():
			return errors.Join(fmt.Errorf("no answer from %s within %s", url, timeout), last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func get(ctx context.Context, client *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s answered %s", url, resp.Status)
	}
	return string(body), nil
}

func exitOnTerm() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	<-sigs
	os.Exit(0)
}
