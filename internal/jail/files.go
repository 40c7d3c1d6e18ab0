package jail

import (
	"bytes"

	"github.com/jaild/jaild/internal/workspace"
)

// writeFiles writes a request's files into the workspace directory root,
// owned by uid:gid.
func writeFiles(root string, files []File, uid, gid int) error {
	if len(files) == 0 {
		return nil
	}
	d, err := workspace.Open(root)
	if err != nil {
		return err
	}
	defer d.Close()
	for _, f := range files {
		if err := d.Write(f.Path, bytes.NewReader(f.Data), uid, gid); err != nil {
			return err
		}
	}
	return nil
}

// collectFiles reads back the files of root that match patterns; only
// call it once every process of the run is dead.
func collectFiles(root string, patterns []string) ([]workspace.File, error) {
	if len(patterns) == 0 {
		return nil, nil
	}
	d, err := workspace.Open(root)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.Collect(patterns)
}
