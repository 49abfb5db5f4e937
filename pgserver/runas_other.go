//go:build !unix

package pgserver

import (
	"os"
	"os/exec"
)

// osUser is a placeholder: only unix systems switch users for a cluster.
type osUser struct{}

func currentRunAs() (*osUser, error)             { return nil, nil }
func (u *osUser) describe() string               { return "" }
func (u *osUser) apply(*exec.Cmd)                {}
func (u *osUser) own(string) error               { return nil }
func (u *osUser) checkTraverse(dir string) error { return nil }

// postmasterAlive reports whether a process with that pid exists.
func postmasterAlive(pid int) bool {
	_, err := os.FindProcess(pid)
	return err == nil
}
