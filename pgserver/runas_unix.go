//go:build unix

package pgserver

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// clusterOSUser is the OS user a private cluster runs as when this process is root.
const clusterOSUser = "postgres"

// osUser is the unprivileged OS user the cluster's commands run as; a nil *osUser means the current user.
type osUser struct {
	name     string
	uid, gid uint32
	groups   []uint32 // all groups, primary included
}

// currentRunAs returns nil unless the process is root, where it returns the OS user "postgres": initdb
// and postgres refuse to run as root.
func currentRunAs() (*osUser, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(clusterOSUser)
	if err != nil {
		return nil, fmt.Errorf("running as root, which initdb refuses, and no OS user %q to run the cluster as: %w", clusterOSUser, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("uid of %s: %w", clusterOSUser, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("gid of %s: %w", clusterOSUser, err)
	}
	r := &osUser{name: u.Username, uid: uint32(uid), gid: uint32(gid), groups: []uint32{uint32(gid)}}
	if ids, err := u.GroupIds(); err == nil {
		for _, id := range ids {
			if g, err := strconv.ParseUint(id, 10, 32); err == nil && !slices.Contains(r.groups, uint32(g)) {
				r.groups = append(r.groups, uint32(g))
			}
		}
	}
	return r, nil
}

func (u *osUser) describe() string {
	if u == nil {
		return ""
	}
	return ", as OS user " + u.name
}

// apply makes cmd run as u.
func (u *osUser) apply(cmd *exec.Cmd) {
	if u == nil {
		return
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: u.groups}}
}

// own gives path to u.
func (u *osUser) own(path string) error {
	if u == nil {
		return nil
	}
	if err := os.Lchown(path, int(u.uid), int(u.gid)); err != nil {
		return fmt.Errorf("chown to %s: %w", u.name, err)
	}
	return nil
}

// checkTraverse reports the first directory from dir up to / that u cannot enter.
func (u *osUser) checkTraverse(dir string) error {
	if u == nil {
		return nil
	}
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("check %s: %w", d, err)
		}
		perm := fi.Mode().Perm()
		ok := perm&0o001 != 0
		if st, isStat := fi.Sys().(*syscall.Stat_t); isStat && !ok {
			ok = (st.Uid == u.uid && perm&0o100 != 0) || (slices.Contains(u.groups, st.Gid) && perm&0o010 != 0)
		}
		if !ok {
			return fmt.Errorf("OS user %s cannot traverse %s (mode %v): make it o+x or put the data directory elsewhere", u.name, d, perm)
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// postmasterAlive reports whether pid is a live postgres process. Where /proc exists the process name
// is checked, so a pid reused by another program after a crash or reboot counts as dead.
func postmasterAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	comm, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return !dirExists("/proc/self") // no procfs: trust kill(0); the process vanished meanwhile: dead
	}
	name := strings.TrimSpace(string(comm))
	return strings.HasPrefix(name, "postgres") || strings.HasPrefix(name, "postmaster")
}

func dirExists(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}
