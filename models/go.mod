// The demo models are data, not Go code. This go.mod makes the directory a module of its
// own so that the module github.com/specula/specula, which a service downloads with go get,
// does not carry them (30 MB); a clone has them, and the README's commands and the tests
// read them from here.
module github.com/specula/specula/models

go 1.26.0
