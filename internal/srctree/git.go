package srctree

// The source revision of a work tree, from git.

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// Revision describes the revision of a work tree.
type Revision struct {
	// Commit is the full hash of HEAD, or "" when dir is not a git work tree
	// or has no commit yet.
	Commit string
	// Dirty reports uncommitted changes to tracked files or untracked,
	// non-ignored files.
	Dirty bool
}

// String is the string stamped into binaries and image labels: the commit,
// with "-dirty" appended for a modified tree, or "unknown" outside git.
func (i Revision) String() string {
	switch {
	case i.Commit == "":
		return "unknown"
	case i.Dirty:
		return i.Commit + "-dirty"
	default:
		return i.Commit
	}
}

// ReadRevision inspects the git work tree at dir. It returns an empty Revision (and no
// error) when git is unavailable, dir is not a work tree, or HEAD has no
// commit, so that source archives still build.
func ReadRevision(ctx context.Context, dir string) (Revision, error) {
	if _, err := exec.LookPath("git"); err != nil {
		return Revision{}, nil
	}
	if _, err := git(ctx, dir, "rev-parse", "--show-toplevel"); err != nil {
		return Revision{}, nil
	}
	head, err := git(ctx, dir, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
	if err != nil || head == "" {
		return Revision{}, nil
	}
	status, err := git(ctx, dir, "status", "--porcelain", "--untracked-files=normal")
	if err != nil {
		return Revision{}, fmt.Errorf("git status in %s: %w", dir, err)
	}
	return Revision{Commit: head, Dirty: status != ""}, nil
}

// GitStatus returns `git status --porcelain` for dir, for messages that list
// what makes a tree dirty.
func GitStatus(ctx context.Context, dir string) (string, error) {
	return git(ctx, dir, "status", "--porcelain", "--untracked-files=normal")
}

// Git runs git with args in dir and returns its trimmed output; the
// error carries git's stderr.
func Git(ctx context.Context, dir string, args ...string) (string, error) {
	return git(ctx, dir, args...)
}

func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}
