module march.example/ids

go 1.21

require github.com/redis/go-redis/v9 v9.5.1
