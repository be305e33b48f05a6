/*
 * dracni's native fast path: the executable the container runtime execs as `dracni`.
 *
 * It answers on its own only a CNI ADD/DEL/CHECK for a pod dracni has nothing for (no pod
 * index file, and for DEL/CHECK no attachment record either), and only when every input
 * passes the checks the Python path applies.  Everything else -- argv use, VERSION/GC/STATUS,
 * any failed check, anything this parser does not fully understand -- is handed, unchanged
 * (argv, env, the stdin bytes already read), to the Python bundle `dracni-python` beside it:
 * all behaviour, every error message included, stays in Python.  The answers here are proven
 * identical to Python's by tests/unit/test_fastpath.py (a differential fuzz over both).
 *
 * Rules mirrored (Python functions named beside each): dracni/entry.py main,
 * dracni/cni/main.py run/_dispatch, dracni/cni/request.py parse/_parse_conf/_parse_env/
 * validate_ifname/parse_cni_args/passthrough_result/state_dir, dracni/cni/versions.py
 * require_supported/to_current, dracni/jsonio.py loads/dumps, dracni/state/records.py
 * pod_index_keys/attachment_key, dracni/state/store.py pod_claim_uids/_path/_safe_component,
 * dracni/cni/plugin.py MetaPlugin.delete/check.  Layout: spec/state-layout.md.
 *
 * Test knobs: DRACNI_FASTPATH_TRACE=<file> appends "fast" or "python <reason>" (one line) to that
 * file; DRACNI_FASTPATH_PIPE (any value) hands stdin over through the pipe fallback, as when
 * memfd_create is unavailable.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <unistd.h>

extern char **environ;

/* The dynamic loader's file name in _internal/libc/ (packaging/dracni.spec copies it there). */
#if defined(__x86_64__)
#define LOADER_NAME "ld-linux-x86-64.so.2"
#elif defined(__aarch64__)
#define LOADER_NAME "ld-linux-aarch64.so.1"
#else
#error "dracni's bundle runs on x86_64 and arm64 (aarch64) nodes"
#endif

static const char *const VERSIONS[] = {"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}; /* versions.py SUPPORTED_VERSIONS */
#define MAX_DEPTH 64     /* Python's json recurses (limit ~1000): stay far below */
#define MAX_MEMBERS 4096 /* the duplicate-key check is quadratic */
#define MAX_DIGITS 4000  /* Python refuses int strings above 4300 digits */

/* -- buffers -------------------------------------------------------------------------------- */
typedef struct {
	char *p;
	size_t len, cap;
} buf;

static void put(buf *b, const char *s, size_t n)
{
	if (!b->p || b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->len + n)
			cap *= 2;
		b->p = realloc(b->p, cap);
		if (!b->p)
			abort();
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
}

static void puts_(buf *b, const char *s) { put(b, s, strlen(s)); }

/* -- a strict JSON parser (jsonio.loads: json.loads of strict UTF-8) ---------------------- */
enum kind { J_OBJ, J_ARR, J_STR, J_INT, J_TRUE, J_FALSE, J_NULL };

typedef struct node {
	enum kind kind;
	const char *s; /* J_STR: decoded UTF-8 (may hold NUL); J_INT: the digits as written */
	size_t n;
	const char *key; /* member of an object: its decoded key */
	size_t keylen;
	struct node *kids, *next; /* J_OBJ/J_ARR: first member; siblings */
} node;

typedef struct {
	const unsigned char *p, *end;
	char *pool; /* decoded strings: never longer than their JSON text */
	int depth;
} parser;

static node *new_node(enum kind k)
{
	node *n = calloc(1, sizeof *n);
	if (!n)
		abort();
	n->kind = k;
	return n;
}

static void ws(parser *ps) /* json's WHITESPACE: [ \t\n\r]* */
{
	while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
		ps->p++;
}

static int hex4(const unsigned char *p, unsigned *out)
{
	unsigned v = 0;
	for (int i = 0; i < 4; i++) {
		unsigned c = p[i], d;
		if (c >= '0' && c <= '9')
			d = c - '0';
		else if (c >= 'a' && c <= 'f')
			d = c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			d = c - 'A' + 10;
		else
			return 0;
		v = v * 16 + d;
	}
	*out = v;
	return 1;
}

/* One UTF-8 sequence as bytes.decode("utf-8") accepts it (no overlongs, no surrogates, at most
 * U+10FFFF); returns its length, 0 when invalid. */
static size_t utf8_len(const unsigned char *p, const unsigned char *end)
{
	size_t n;
	unsigned lo = 0x80, hi = 0xBF;
	if (p[0] >= 0xC2 && p[0] <= 0xDF)
		n = 2;
	else if (p[0] >= 0xE0 && p[0] <= 0xEF) {
		n = 3;
		if (p[0] == 0xE0)
			lo = 0xA0;
		if (p[0] == 0xED)
			hi = 0x9F;
	} else if (p[0] >= 0xF0 && p[0] <= 0xF4) {
		n = 4;
		if (p[0] == 0xF0)
			lo = 0x90;
		if (p[0] == 0xF4)
			hi = 0x8F;
	} else
		return 0;
	if ((size_t)(end - p) < n || p[1] < lo || p[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++)
		if (p[i] < 0x80 || p[i] > 0xBF)
			return 0;
	return n;
}

static void put_utf8(char **o, unsigned cp)
{
	char *q = *o;
	if (cp < 0x80)
		*q++ = (char)cp;
	else if (cp < 0x800) {
		*q++ = (char)(0xC0 | cp >> 6);
		*q++ = (char)(0x80 | (cp & 0x3F));
	} else {
		*q++ = (char)(0xE0 | cp >> 12);
		*q++ = (char)(0x80 | (cp >> 6 & 0x3F));
		*q++ = (char)(0x80 | (cp & 0x3F));
	}
	*o = q;
}

/* json's scanstring (strict): no control characters, the JSON escapes only.  A \u escape of a
 * surrogate is refused: Python would keep a lone one, or join a pair. */
static int string(parser *ps, const char **s, size_t *n)
{
	char *o = ps->pool, *start = ps->pool;
	ps->p++; /* the opening quote */
	while (ps->p < ps->end) {
		unsigned c = *ps->p;
		if (c == '"') {
			ps->p++;
			*s = start;
			*n = (size_t)(o - start);
			ps->pool = o;
			return 1;
		}
		if (c < 0x20)
			return 0;
		if (c == '\\') {
			unsigned cp;
			if (ps->end - ps->p < 2)
				return 0;
			switch (ps->p[1]) {
			case '"': *o++ = '"'; break;
			case '\\': *o++ = '\\'; break;
			case '/': *o++ = '/'; break;
			case 'b': *o++ = '\b'; break;
			case 'f': *o++ = '\f'; break;
			case 'n': *o++ = '\n'; break;
			case 'r': *o++ = '\r'; break;
			case 't': *o++ = '\t'; break;
			case 'u':
				if (ps->end - ps->p < 6 || !hex4(ps->p + 2, &cp) || (cp >= 0xD800 && cp <= 0xDFFF))
					return 0;
				put_utf8(&o, cp);
				ps->p += 4;
				break;
			default: return 0;
			}
			ps->p += 2;
		} else if (c < 0x80) {
			*o++ = (char)c;
			ps->p++;
		} else {
			size_t k = utf8_len(ps->p, ps->end);
			if (!k)
				return 0;
			memcpy(o, ps->p, k);
			o += k;
			ps->p += k;
		}
	}
	return 0;
}

static node *value(parser *ps);

/* json's NUMBER_RE, integers only: a fraction or an exponent (a float), and -0 (which Python
 * writes back as 0), are not understood here. */
static node *number(parser *ps)
{
	const unsigned char *start = ps->p;
	if (*ps->p == '-')
		ps->p++;
	if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
		return NULL;
	if (*ps->p == '0')
		ps->p++;
	else
		while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
			ps->p++;
	if (ps->p < ps->end && (*ps->p == '.' || *ps->p == 'e' || *ps->p == 'E'))
		return NULL;
	size_t n = (size_t)(ps->p - start);
	if (n > MAX_DIGITS || (n == 2 && start[0] == '-' && start[1] == '0'))
		return NULL;
	node *v = new_node(J_INT);
	v->s = (const char *)start;
	v->n = n;
	return v;
}

static node *literal(parser *ps, const char *word, enum kind k)
{
	size_t n = strlen(word);
	if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n))
		return NULL;
	ps->p += n;
	return new_node(k);
}

/* json's JSONObject/JSONArray; a repeated key is not understood (Python keeps the last value
 * at the first key's place). */
static node *container(parser *ps, int is_obj)
{
	node *v = new_node(is_obj ? J_OBJ : J_ARR), **tail = &v->kids;
	int count = 0;
	if (++ps->depth > MAX_DEPTH)
		return NULL;
	ps->p++;
	ws(ps);
	if (ps->p < ps->end && *ps->p == (is_obj ? '}' : ']')) {
		ps->p++;
		ps->depth--;
		return v;
	}
	for (;;) {
		const char *key = NULL;
		size_t keylen = 0;
		if (is_obj) {
			if (ps->p >= ps->end || *ps->p != '"' || !string(ps, &key, &keylen))
				return NULL;
			for (node *m = v->kids; m; m = m->next)
				if (m->keylen == keylen && !memcmp(m->key, key, keylen))
					return NULL;
			ws(ps);
			if (ps->p >= ps->end || *ps->p != ':')
				return NULL;
			ps->p++;
			ws(ps);
		}
		node *m = value(ps);
		if (!m || ++count > MAX_MEMBERS)
			return NULL;
		m->key = key;
		m->keylen = keylen;
		*tail = m;
		tail = &m->next;
		ws(ps);
		if (ps->p < ps->end && *ps->p == ',') {
			ps->p++;
			ws(ps);
			continue;
		}
		if (ps->p < ps->end && *ps->p == (is_obj ? '}' : ']')) {
			ps->p++;
			ps->depth--;
			return v;
		}
		return NULL;
	}
}

static node *value(parser *ps)
{
	if (ps->p >= ps->end)
		return NULL;
	switch (*ps->p) {
	case '{': return container(ps, 1);
	case '[': return container(ps, 0);
	case '"': {
		node *v = new_node(J_STR);
		return string(ps, &v->s, &v->n) ? v : NULL;
	}
	case 't': return literal(ps, "true", J_TRUE);
	case 'f': return literal(ps, "false", J_FALSE);
	case 'n': return literal(ps, "null", J_NULL);
	default: return number(ps);
	}
}

/* -- the serializer: json.dumps(obj, separators=(",", ":"), ensure_ascii=True) ------------- */
static void dump_str(buf *b, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *p = (const unsigned char *)s, *end = p + n;
	char esc[13];
	put(b, "\"", 1);
	while (p < end) {
		unsigned c = *p, cp;
		if (c >= 0x20 && c <= 0x7E && c != '"' && c != '\\') {
			put(b, (const char *)p++, 1);
			continue;
		}
		const char *e = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n" : c == '\r' ? "\\r"
			      : c == '\t' ? "\\t" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
		if (e) {
			puts_(b, e);
			p++;
			continue;
		}
		if (c < 0x80) { /* other controls and DEL */
			cp = c;
			p++;
		} else { /* valid UTF-8: the parser checked it */
			size_t k = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
			cp = c & (k == 2 ? 0x1F : k == 3 ? 0x0F : 0x07);
			for (size_t i = 1; i < k; i++)
				cp = cp << 6 | (p[i] & 0x3F);
			p += k;
		}
		if (cp >= 0x10000) { /* a surrogate pair, as Python writes it */
			unsigned v = cp - 0x10000, hi = 0xD800 | v >> 10, lo = 0xDC00 | (v & 0x3FF);
			snprintf(esc, sizeof esc, "\\u%c%c%c%c\\u%c%c%c%c", hex[hi >> 12], hex[hi >> 8 & 15],
				 hex[hi >> 4 & 15], hex[hi & 15], hex[lo >> 12], hex[lo >> 8 & 15], hex[lo >> 4 & 15],
				 hex[lo & 15]);
		} else
			snprintf(esc, sizeof esc, "\\u%c%c%c%c", hex[cp >> 12], hex[cp >> 8 & 15], hex[cp >> 4 & 15],
				 hex[cp & 15]);
		puts_(b, esc);
	}
	put(b, "\"", 1);
}

static void dump(buf *b, const node *v)
{
	switch (v->kind) {
	case J_OBJ:
	case J_ARR:
		put(b, v->kind == J_OBJ ? "{" : "[", 1);
		for (const node *m = v->kids; m; m = m->next) {
			if (m != v->kids)
				put(b, ",", 1);
			if (v->kind == J_OBJ) {
				dump_str(b, m->key, m->keylen);
				put(b, ":", 1);
			}
			dump(b, m);
		}
		put(b, v->kind == J_OBJ ? "}" : "]", 1);
		break;
	case J_STR: dump_str(b, v->s, v->n); break;
	case J_INT: put(b, v->s, v->n); break; /* canonical as parsed: no leading zeros, no -0 */
	case J_TRUE: puts_(b, "true"); break;
	case J_FALSE: puts_(b, "false"); break;
	case J_NULL: puts_(b, "null"); break;
	}
}

/* -- the checks --------------------------------------------------------------------------- */
static const node *member(const node *obj, const char *key)
{
	for (const node *m = obj->kids; m; m = m->next)
		if (m->keylen == strlen(key) && !memcmp(m->key, key, m->keylen))
			return m;
	return NULL;
}

static int is_str(const node *v, const char *s) { return v->kind == J_STR && v->n == strlen(s) && !memcmp(v->s, s, v->n); }

static const char *supported(const node *v) /* versions.py require_supported: exact match */
{
	for (size_t i = 0; i < sizeof VERSIONS / sizeof *VERSIONS; i++)
		if (is_str(v, VERSIONS[i]))
			return VERSIONS[i];
	return NULL;
}

static int identifier(const char *s, size_t n) /* request.py is_cni_identifier */
{
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		int alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
		if (!alnum && (i == 0 || (c != '_' && c != '.' && c != '-')))
			return 0;
	}
	return n > 0;
}

static int list_of_objects(const node *v) /* request.py _check_result_shape */
{
	if (!v || v->kind == J_NULL)
		return 1;
	if (v->kind != J_ARR)
		return 0;
	for (const node *m = v->kids; m; m = m->next)
		if (m->kind != J_OBJ)
			return 0;
	return 1;
}

/* request.py _parse_conf; returns NULL when the config is one this program answers for. */
static const char *check_conf(const node *conf, const char **version)
{
	const node *v = member(conf, "cniVersion");
	if (!v || !(*version = supported(v)))
		return "cniVersion";
	v = member(conf, "name");
	if (!v || v->kind != J_STR || !identifier(v->s, v->n))
		return "name";
	static const char *const paths[] = {"stateDir", "logFile"}; /* _check_path */
	for (int i = 0; i < 2; i++)
		if ((v = member(conf, paths[i])) && (v->kind != J_STR || !v->n || v->s[0] != '/' || memchr(v->s, 0, v->n)))
			return paths[i];
	/* logLevel "debug": Python writes a debug line (main.py _dispatch: "pass-through") */
	if ((v = member(conf, "logLevel")) && !is_str(v, "info") && !is_str(v, "warning") && !is_str(v, "error"))
		return "logLevel";
	if ((v = member(conf, "delegateTimeout"))) { /* an int, 0 < t <= MAX_DELEGATE_TIMEOUT */
		if (v->kind != J_INT || v->s[0] == '-' || v->n > 4 || atoi(v->s) < 1 || atoi(v->s) > 3600)
			return "delegateTimeout";
	}
	if ((v = member(conf, "runtimeConfig")) && v->kind != J_OBJ)
		return "runtimeConfig";
	if ((v = member(conf, "args")) && v->kind != J_OBJ)
		return "args";
	const node *prev = member(conf, "prevResult");
	if (prev && prev->kind != J_NULL) { /* conf.get("prevResult") is not None */
		if (prev->kind != J_OBJ)
			return "prevResult";
		if ((v = member(prev, "cniVersion")) && !supported(v))
			return "prevResult.cniVersion";
		if (!list_of_objects(member(prev, "interfaces")) || !list_of_objects(member(prev, "ips")) ||
		    !list_of_objects(member(prev, "routes")))
			return "prevResult shape";
		if ((v = member(prev, "dns")) && v->kind != J_OBJ)
			return "prevResult.dns";
		/* versions.py to_current cannot fail past these checks: it copies, drops ips[].version */
	}
	return NULL;
}

/* request.py validate_ifname, narrowed: printable ASCII only (Python's isspace() knows more
 * spaces than ASCII's; such names are handed over, never judged here). */
static int ifname_ok(const char *s)
{
	size_t n = strlen(s);
	if (!n || n > 15 || !strcmp(s, ".") || !strcmp(s, ".."))
		return 0;
	for (size_t i = 0; i < n; i++)
		if (s[i] <= ' ' || s[i] > '~' || s[i] == '/' || s[i] == ':')
			return 0;
	return 1;
}

/* A pod's UID, namespace or name as part of a record's file name (store.py _safe_component
 * refuses '/'): printable ASCII, no '/', no "..", never judged here otherwise. */
static int path_text(const char *s)
{
	if (strstr(s, ".."))
		return 0;
	for (; *s; s++)
		if (*s < ' ' || *s > '~' || *s == '/')
			return 0;
	return 1;
}

/* request.py parse_cni_args: "K=V;K2=V2", the last value of a key wins. */
static int cni_args(const char *args, const char *key, char *out, size_t cap)
{
	size_t klen = strlen(key);
	out[0] = 0;
	for (const char *p = args; *p;) {
		const char *end = strchr(p, ';'), *eq;
		size_t n = end ? (size_t)(end - p) : strlen(p);
		if (n) {
			eq = memchr(p, '=', n);
			if (!eq || eq == p)
				return 0; /* not a KEY=VALUE pair */
			if ((size_t)(eq - p) == klen && !memcmp(p, key, klen)) {
				size_t vlen = n - klen - 1;
				if (vlen >= cap)
					return 0;
				memcpy(out, eq + 1, vlen);
				out[vlen] = 0;
			}
		}
		p += n + (end ? 1 : 0);
	}
	return 1;
}

/* A record file of store.py StateDir._path; 1 when it provably does not exist (ENOENT: what
 * atomicfile.read_if_exists reads as None), 0 for anything else (exists, unreadable, ...). */
static int absent(const char *root, const char *dir, const char *stem)
{
	char path[PATH_MAX];
	struct stat st;
	if (snprintf(path, sizeof path, "%s/%s/%s.json", root, dir, stem) >= (int)sizeof path)
		return 0;
	return stat(path, &st) < 0 && errno == ENOENT;
}

/* Request.state_dir: config stateDir, else $DRACNI_STATE_DIR, else defaults.STATE_DIR.  Python
 * normalizes it (os.path.abspath): "." and ".." components, relative and non-ASCII paths are
 * handed over rather than resolved differently here. */
static int state_root(const node *conf, char *out, size_t cap)
{
	const node *v = member(conf, "stateDir");
	const char *env = getenv("DRACNI_STATE_DIR");
	const char *s = v ? v->s : env && *env ? env : "/var/lib/dracni";
	size_t n = v ? v->n : strlen(s);
	if (n >= cap || s[0] != '/')
		return 0;
	memcpy(out, s, n);
	out[n] = 0;
	for (size_t i = 0; i < n; i++)
		if (out[i] < ' ' || out[i] > '~')
			return 0;
	for (char *c = out; (c = strstr(c, "/.")); c++)
		if (c[2] == 0 || c[2] == '/' || (c[2] == '.' && (c[3] == 0 || c[3] == '/')))
			return 0;
	return 1;
}

/* main.py run/_dispatch for ADD/DEL/CHECK of a pod with nothing for dracni; NULL when answered
 * (out holds stdout), else why it is handed over. */
static const char *decide(int argc, const unsigned char *in, size_t inlen, buf *out)
{
	if (argc != 1) /* entry.py main: arguments make the operator CLI */
		return "argv";
	const char *cmd = getenv("CNI_COMMAND");
	if (!cmd || (strcmp(cmd, "ADD") && strcmp(cmd, "DEL") && strcmp(cmd, "CHECK")))
		return "command";
	if (getenv("DRACNI_DELEGATE_OF")) /* request.py DELEGATE_MARK: Python refuses */
		return "delegate mark";
	if (getenv("DRACNI_LOG_LEVEL")) /* log.py: a debug threshold would log "pass-through" */
		return "log level";

	parser ps = {in, in + inlen, malloc(inlen + 1), 0};
	if (!ps.pool)
		abort();
	ws(&ps);
	node *conf = ps.p < ps.end && *ps.p == '{' ? value(&ps) : NULL; /* jsonio.loads_object */
	ws(&ps);
	if (!conf || ps.p != ps.end)
		return "json";
	const char *version = NULL, *why = check_conf(conf, &version);
	if (why)
		return why;
	if (!strcmp(cmd, "CHECK") && version[0] == '0' && version[2] == '3') /* plugin.py check: 0.4.0+ */
		return "CHECK version";

	/* request.py _parse_env */
	const char *cid = getenv("CNI_CONTAINERID"), *netns = getenv("CNI_NETNS"), *ifname = getenv("CNI_IFNAME");
	const char *args = getenv("CNI_ARGS"), *path = getenv("CNI_PATH");
	if (!cid || !identifier(cid, strlen(cid)))
		return "CNI_CONTAINERID";
	if (strcmp(cmd, "DEL") && (!netns || !*netns))
		return "CNI_NETNS";
	if (!ifname || !ifname_ok(ifname))
		return "CNI_IFNAME";
	if (!path || !*path)
		return "CNI_PATH";
	char uid[256], ns[256], name[256];
	args = args ? args : "";
	if (!cni_args(args, "K8S_POD_UID", uid, sizeof uid) || !cni_args(args, "K8S_POD_NAMESPACE", ns, sizeof ns) ||
	    !cni_args(args, "K8S_POD_NAME", name, sizeof name))
		return "CNI_ARGS";

	char root[PATH_MAX], stem[PATH_MAX];
	if (!state_root(conf, root, sizeof root))
		return "state dir";
	const node *net = member(conf, "name");
	if (strcmp(cmd, "ADD")) { /* plugin.py delete/check: the attachment record first */
		/* records.py attachment_key */
		if (snprintf(stem, sizeof stem, "%.*s+%s+%s", (int)net->n, net->s, cid, ifname) >= (int)sizeof stem ||
		    !absent(root, "attachments", stem))
			return "attachment record";
	}
	/* store.py pod_claim_uids: with a pod UID only uid_<uid>; else name_<ns>_<name> */
	if (*uid) {
		if (!path_text(uid))
			return "K8S_POD_UID";
		snprintf(stem, sizeof stem, "uid_%s", uid);
	} else if (*ns && *name) {
		if (!path_text(ns) || !path_text(name))
			return "K8S_POD_NAME";
		snprintf(stem, sizeof stem, "name_%s_%s", ns, name);
	} else
		stem[0] = 0;
	if (*stem && !absent(root, "pods", stem))
		return "pod index";

	if (!strcmp(cmd, "ADD")) { /* request.py passthrough_result */
		const node *prev = member(conf, "prevResult");
		if (prev && prev->kind != J_NULL)
			dump(out, prev);
		else {
			puts_(out, "{\"cniVersion\":\"");
			puts_(out, version);
			puts_(out, "\",\"dns\":{}}");
		}
		put(out, "\n", 1);
	}
	return NULL;
}

/* -- handing over --------------------------------------------------------------------------- */
static void trace(const char *what)
{
	const char *file = getenv("DRACNI_FASTPATH_TRACE");
	if (!file || !*file)
		return;
	int fd = open(file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	char line[128];
	int n = snprintf(line, sizeof line, "%s\n", what);
	if (write(fd, line, (size_t)n) < 0) { /* a trace only */
	}
	close(fd);
}

static int write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t k = write(fd, p, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

/* The stdin bytes already read become fd 0 again: a memfd, else a pipe fed by a child. */
static int restore_stdin(const unsigned char *in, size_t inlen)
{
	int fd = getenv("DRACNI_FASTPATH_PIPE") ? -1 : memfd_create("dracni-stdin", MFD_CLOEXEC);
	if (fd >= 0) {
		if (write_all(fd, (const char *)in, inlen) < 0 || lseek(fd, 0, SEEK_SET) < 0 || dup2(fd, 0) < 0)
			return -1;
		close(fd);
		return 0;
	}
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		close(p[0]);
		_exit(write_all(p[1], (const char *)in, inlen) < 0);
	}
	close(p[1]);
	if (dup2(p[0], 0) < 0)
		return -1;
	close(p[0]);
	return 0;
}

/*
 * Exec dracni-python on the bundle's own C library (issue 14; packaging/dracni.spec copies the
 * build machine's loader and glibc into _internal/libc/): the bundle's loader with
 * --library-path runs it and everything it loads, so the node's C library does not matter.
 * argv[0] becomes dracni-python's path: the bootloader finds its archive through it (the CLI
 * names itself "dracni" whatever argv[0] says).  The PyInstaller bootloader would re-exec
 * itself to put _internal/ on LD_LIBRARY_PATH -- through the node's loader again, and into the
 * environment of every delegate -- unless told it is that restarted process: the two _PYI_
 * variables of bootloader/src/pyi_main.c (level -1: "parent that needed a restart", and the
 * archive it restarted).  A bundle without _internal/libc/ (never built so) runs plainly.
 */
static void exec_python(const char *exe, size_t dirlen, char **argv)
{
	char loader[PATH_MAX], libpath[2 * PATH_MAX + 16];
	int argc = 0;
	while (argv[argc])
		argc++;
	if ((size_t)snprintf(loader, sizeof loader, "%.*s_internal/libc/" LOADER_NAME, (int)dirlen, exe) < sizeof loader &&
	    access(loader, X_OK) == 0) {
		char **args = calloc((size_t)argc + 4, sizeof *args);
		if (!args)
			abort();
		snprintf(libpath, sizeof libpath, "%.*s_internal/libc:%.*s_internal", (int)dirlen, exe, (int)dirlen, exe);
		int k = 0;
		args[k++] = loader;
		args[k++] = "--library-path";
		args[k++] = libpath;
		args[k++] = (char *)exe;
		for (int i = 1; i < argc; i++)
			args[k++] = argv[i];
		args[k] = NULL;
		if (setenv("_PYI_ARCHIVE_FILE", exe, 1) < 0 || setenv("_PYI_PARENT_PROCESS_LEVEL", "-1", 1) < 0)
			abort();
		execve(loader, args, environ);
		fprintf(stderr, "dracni: cannot exec %s: %s\n", loader, strerror(errno));
		exit(127);
	}
	execve(exe, argv, environ);
	fprintf(stderr, "dracni: cannot exec %s: %s\n", exe, strerror(errno));
	exit(127);
}

static void handover(char **argv, const unsigned char *in, size_t inlen, int consumed, const char *why)
{
	char exe[PATH_MAX], line[160];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 32);
	char *slash;
	snprintf(line, sizeof line, "python %s", why);
	trace(line);
	if (n <= 0)
		n = 0;
	exe[n] = 0;
	if (n == 0) { /* no /proc (a chroot without it): the path this program was exec'd by */
		const char *execfn = (const char *)getauxval(AT_EXECFN);
		char real[PATH_MAX];
		if (execfn && strchr(execfn, '/') && realpath(execfn, real) && strlen(real) < sizeof exe - 32)
			strcpy(exe, real);
	}
	slash = strrchr(exe, '/');
	if (!slash) {
		fprintf(stderr, "dracni: cannot find its own executable (/proc/self/exe)\n");
		exit(127);
	}
	strcpy(slash + 1, "dracni-python");
	if (consumed && restore_stdin(in, inlen) < 0) {
		perror("dracni: cannot hand stdin over");
		exit(127);
	}
	exec_python(exe, (size_t)(slash + 1 - exe), argv);
}

int main(int argc, char **argv)
{
	buf in = {0}, out = {0};
	int consumed = 0;
	put(&in, "", 0); /* never a NULL buffer */
	if (argc == 1 && getenv("CNI_COMMAND")) { /* else the CLI: stdin is not ours to read */
		char chunk[65536];
		for (;;) {
			ssize_t k = read(0, chunk, sizeof chunk);
			if (k < 0 && errno == EINTR)
				continue;
			if (k < 0 && !consumed) /* Python reports it: give it the same fd 0 */
				handover(argv, NULL, 0, 0, "stdin");
			if (k <= 0)
				break;
			consumed = 1;
			put(&in, chunk, (size_t)k);
		}
		consumed = 1;
	}
	const char *why = decide(argc, (const unsigned char *)in.p, in.len, &out);
	if (why)
		handover(argv, (const unsigned char *)in.p, in.len, consumed, why);
	if (out.len && write_all(1, out.p, out.len) < 0) /* nothing written yet: Python gets to fail */
		handover(argv, (const unsigned char *)in.p, in.len, consumed, "stdout");
	trace("fast");
	return 0;
}
