module github.com/iadeep/iadeep/tools/node/pause

go 1.26.0
