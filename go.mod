module github.com/petrel-mq/petrel

go 1.26.0

require github.com/valyala/bytebufferpool v1.0.0
