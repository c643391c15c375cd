package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// A read command given an admin handler's URL (package admin) for PATH
// fetches a consistent copy of the store from its /backup into a
// temporary file, and reads that: one code path for every command, on a
// snapshot of one instant. The copy is removed when the command ends.

// authEnv names the environment variable whose value is sent as the
// Authorization header of the requests to an admin handler.
const authEnv = "ONCEKV_ADMIN_AUTHORIZATION"

// fetchTimeout bounds the download of a copy.
const fetchTimeout = 10 * time.Minute

// cleanups run when the command ends (see run): the copies fetched.
var cleanups []func()

// isURL reports whether a PATH argument is an http or https URL.
func isURL(path string) bool {
	return strings.HasPrefix(path, "http://") || strings.HasPrefix(path, "https://")
}

// redacted is path for output: a URL without its password.
func redacted(path string) string {
	if u, err := url.Parse(path); err == nil && isURL(path) {
		return u.Redacted()
	}
	return path
}

// headerFlag is a repeatable -header "Name: value".
type headerFlag struct{ h http.Header }

func (f *headerFlag) String() string { return "" }

func (f *headerFlag) Set(v string) error {
	name, value, ok := strings.Cut(v, ":")
	name, value = strings.TrimSpace(name), strings.TrimSpace(value)
	if !ok || name == "" || strings.ContainsAny(value, "\r\n") {
		return fmt.Errorf("want \"Name: value\", got %q", v)
	}
	if f.h == nil {
		f.h = http.Header{}
	}
	f.h.Add(name, value)
	return nil
}

// fetch downloads rawURL's /backup into a temporary file and returns its
// path.
func (s *storeFlags) fetch(rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return "", &usageError{fmt.Sprintf("%s: not a URL of an admin handler: %v", rawURL, err)}
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/backup"
	ctx, cancel := context.WithTimeout(context.Background(), fetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return "", err
	}
	for name, values := range s.headers.h {
		req.Header[http.CanonicalHeaderKey(name)] = values
	}
	if auth := os.Getenv(authEnv); auth != "" && req.Header.Get("Authorization") == "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("oncekv: fetch a copy of the store from %s: %w", u.Redacted(), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		excerpt, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
		return "", fmt.Errorf("oncekv: fetch a copy of the store from %s: %s: %s (is it the admin handler's URL, and are -header or $%s right?)",
			u.Redacted(), resp.Status, strings.TrimSpace(string(excerpt)), authEnv)
	}
	dir, err := os.MkdirTemp("", "oncekv-remote")
	if err != nil {
		return "", err
	}
	cleanups = append(cleanups, func() { _ = os.RemoveAll(dir) })
	path := filepath.Join(dir, "copy.db")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return "", err
	}
	_, err = io.Copy(f, resp.Body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("oncekv: fetch a copy of the store from %s: %w", u.Redacted(), err)
	}
	return path, nil
}
