/*-------------------------------------------------------------------------
 *
 * publish.c
 *	  dedup_publish(): a message published in the caller's transaction, to
 *	  a destination of dedup_outbox_destinations, as a row of dedup_outbox
 *	  (table mode) or a transactional logical decoding message (WAL mode);
 *	  and the argument checks of the outbox's SQL functions.
 *
 * dedup_publish() runs as its caller, who needs EXECUTE on it and nothing
 * on the tables: the publisher mapping (dedup_outbox_publishers) is checked
 * for the caller, then the destination is read and the row written as the
 * owner of dedup_outbox, in a security-restricted operation (as REFRESH
 * MATERIALIZED VIEW runs as a view's owner).  The destination is read
 * through SPI, with a plan kept for the backend's life, unless this backend
 * has it in its cache already; a message to a WAL-mode destination then
 * writes a WAL record and nothing else, as its caller, since no other
 * role's code can run there.  The row is written directly, as the claims
 * write processed_messages (claim/claim_writer.c), while dedup_outbox is as
 * version 1.4 made it (publish_direct_possible), and through SPI with a
 * kept plan otherwise.  Each backend keeps the destinations it has
 * published to, with their mode and publishers: every change of
 * dedup_outbox_destinations or dedup_outbox_publishers invalidates their
 * relcache entries (row and TRUNCATE triggers that fire always, the
 * function of dedup_consumer_roles' triggers), which empties the cache,
 * so a change applies to the transactions that start after it commits.
 * A drop goes further: every publish holds a lock on dedup_outbox from
 * before its check of the destination to its end, which the drop waits
 * for and holds until it commits (dedup_outbox_drop_messages()), so no
 * message to a dropped destination ever commits after the drop.
 * The plans' statements name the extension's schema, call only
 * pg_catalog's operators, and are prepared again when the extension or its
 * schema changes.  The row is written as INSERT ... ON
 * CONFLICT (message_id) DO NOTHING writes it: a message whose id is there
 * already (the same incoming message handled again) is not written twice.
 * What a superuser adds to the table acts as it says (a trigger, a CHECK
 * constraint, row security forced on its owner, another unique index raise
 * their errors; a changed default or an added column is filled in): the
 * row is then written through SPI.  A rule, which could discard messages
 * silently, is refused.
 *
 * In WAL mode the message is a transactional logical decoding message with
 * the prefix "dedup" (what pg_logical_emit_message(true, 'dedup', ...)
 * writes): decoded at its transaction's commit, never if it aborts.  Its
 * content is a signature line and a JSON object: "dedup-v1 ", the
 * HMAC-SHA256 (in hex) of the top-level transaction id in decimal, a
 * newline and the JSON under the key of dedup_outbox_signing_key, a
 * newline, then {"id": ..., "destination": ..., "key": ..., "headers": ...,
 * "payload": ...} (key and headers null when not given): the relay sends
 * nothing it cannot verify (publish_sign).  The headers are checked here,
 * in both modes, to be what every broker carries and routes by nothing
 * (publish_check_headers).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/detoast.h"
#include "access/table.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "common/hmac.h"
#include "common/sha2.h"
#include "catalog/dependency.h"
#include "catalog/pg_attribute.h"
#include "catalog/pg_index.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "nodes/primnodes.h"
#include "replication/message.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "claim/claim.h"
#include "compat.h"
#include "keys.h"
#include "outbox/outbox.h"
#include "tables/relations.h"

PG_FUNCTION_INFO_V1(dedup_publish);
PG_FUNCTION_INFO_V1(dedup_outbox_valid);
PG_FUNCTION_INFO_V1(dedup_outbox_valid_lease);
PG_FUNCTION_INFO_V1(dedup_outbox_drop_messages);

/* the longest lease a relay may take */
#define MAX_LEASE_USECS		(USECS_PER_DAY)

/*
 * The plans of dedup_publish(), kept for the backend's life, and what they
 * were prepared for: the extension (its OID changes when it is created
 * again) and its schema (a rename resets them: syscache callback).
 */
typedef struct PublishPlans
{
	Oid			extension;
	Oid			outbox;			/* dedup_outbox */
	Oid			destinations;	/* dedup_outbox_destinations */
	Oid			publishers;		/* dedup_outbox_publishers */
	Oid			signing_key;	/* dedup_outbox_signing_key (1.5), or none */
	SPIPlanPtr	lookup;			/* a destination's mode and publishers */
	SPIPlanPtr	insert;			/* a row of dedup_outbox */
} PublishPlans;

static PublishPlans plans;
static bool plans_callbacks = false;

/* The columns of dedup_outbox as version 1.4 creates them, in order */
static const struct
{
	const char *name;
	Oid			type;
	bool		notnull;
}			outbox_columns[] = {
	{"seq", INT8OID, true},
	{"message_id", TEXTOID, true},
	{"destination", TEXTOID, true},
	{"key", TEXTOID, false},
	{"headers", JSONBOID, false},
	{"payload", TEXTOID, true},
	{"created_at", TIMESTAMPTZOID, true},
	{"lease_until", TIMESTAMPTZOID, false},
	{"lease_holder", TEXTOID, false},
	{"attempts", INT4OID, true},
	{"sent_at", TIMESTAMPTZOID, false}
};

#define OUTBOX_NATTS		lengthof(outbox_columns)
#define OUTBOX_SEQ			1
#define OUTBOX_MESSAGE_ID	2
#define OUTBOX_CREATED_AT	7
#define OUTBOX_ATTEMPTS		10

/*
 * May dedup_outbox be written directly (publish_direct_possible)?  Decided
 * again after any change of the table (its relcache entry invalidated),
 * with the sequence of its seq column.
 */
typedef enum OutboxDirect
{
	OUTBOX_DIRECT_UNKNOWN,
	OUTBOX_DIRECT_NO,
	OUTBOX_DIRECT_YES
} OutboxDirect;

static OutboxDirect outbox_direct = OUTBOX_DIRECT_UNKNOWN;
static Oid	outbox_seq = InvalidOid;

/* A destination as this backend last read it (the cache's entries) */
typedef struct Destination
{
	char		name[DEDUP_OUTBOX_MAX_NAME_BYTES + 1];	/* the key */
	bool		wal;			/* mode 'wal' */
	int			npublishers;
	Oid		   *publishers;		/* in destinations_context */
} Destination;

static HTAB *destinations = NULL;
static MemoryContext destinations_context = NULL;

/*
 * The key WAL-mode messages are signed with, read with each WAL-mode
 * destination before it enters the cache and forgotten with the cache: a
 * cached WAL-mode destination implies the key
 */
static uint8 signing_key[DEDUP_OUTBOX_SIGNING_KEY_BYTES];
static bool signing_key_valid = false;

/* Forget every destination read */
static void
publish_destinations_reset(void)
{
	if (destinations_context != NULL)
		MemoryContextReset(destinations_context);
	destinations = NULL;
	explicit_bzero(signing_key, sizeof(signing_key));
	signing_key_valid = false;
}

/* A schema changed (renamed, dropped): prepare the plans again */
static void
publish_plans_reset(Datum arg, int cacheid, uint32 hashvalue)
{
	plans.extension = InvalidOid;
	outbox_direct = OUTBOX_DIRECT_UNKNOWN;
	publish_destinations_reset();
}

/*
 * A destination or its mapping changed, or dedup_outbox (or every
 * relation: InvalidOid)
 */
static void
publish_destinations_invalidate(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == plans.destinations ||
		relid == plans.publishers || relid == plans.signing_key)
		publish_destinations_reset();
	if (relid == InvalidOid || relid == plans.outbox)
		outbox_direct = OUTBOX_DIRECT_UNKNOWN;
}

/*
 * Raise the error a caller of function must see when argument argname is
 * NULL (22004), empty or longer than max_bytes (22023); the length is read
 * from the varlena header, without detoasting.
 */
void
dedup_outbox_check_name(const char *function, const char *argname,
						Datum value, bool isnull, Size max_bytes)
{
	Size		len;

	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"%s\" of %s must not be null",
						argname, function)));
	len = toast_raw_datum_size(value) - VARHDRSZ;
	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"%s\" of %s must not be empty",
						argname, function)));
	if (len > max_bytes)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"%s\" of %s is too long", argname, function),
				 errdetail("It is %zu bytes; at most %zu bytes are accepted.",
						   len, max_bytes)));
}

/*
 * Raise the error of dedup_publish() for a payload or headers (argument
 * argname) larger than dedup.outbox_max_payload, measured without
 * detoasting.
 */
static void
publish_check_size(const char *argname, Datum value)
{
	Size		len = toast_raw_datum_size(value) - VARHDRSZ;

	if (len > (Size) dedup_outbox_max_payload)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"%s\" of dedup_publish is too long", argname),
				 errdetail("It is %zu bytes; dedup.outbox_max_payload is %d bytes.",
						   len, dedup_outbox_max_payload)));
}

/* A header name a broker acts on, or that the relay sets itself */
static bool
publish_reserved_header(const char *name, int len)
{
	return (len == 2 && pg_strncasecmp(name, "cc", 2) == 0) ||
		(len == 3 && pg_strncasecmp(name, "bcc", 3) == 0) ||
		(len >= 2 && pg_strncasecmp(name, "x-", 2) == 0) ||
		(len >= 6 && pg_strncasecmp(name, "dedup-", 6) == 0);
}

/* Raise dedup_publish()'s error for header name, saying why in detail */
static void
publish_bad_header(const char *name, int len, const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("header \"%s\" of dedup_publish is not accepted",
					pnstrdup(name, Min(len, 64))),
			 errdetail_internal("%s", detail),
			 errhint("A header is a name of 1 to %d bytes, not CC, BCC or beginning with \"x-\" or \"dedup-\", with a string, an integer of 64 bits or a boolean as its value.",
					 DEDUP_OUTBOX_MAX_HEADER_NAME_BYTES)));
}

/*
 * Check that every broker can carry the headers as they are, so that the
 * relay never meets a message it cannot send: a flat object (an AMQP
 * field table, Kafka's record headers), its names short strings that no
 * broker routes by (RabbitMQ's CC and BCC send a copy to further queues:
 * a way around the publisher mapping; "x-" names are the broker's own;
 * "dedup-" names the relay's), its values strings, integers of 64 bits or
 * booleans, the whole as the relay encodes it at most
 * DEDUP_OUTBOX_MAX_HEADERS_BYTES (a frame of the smallest frame size
 * RabbitMQ accepts carries it).
 */
static void
publish_check_headers(Jsonb *headers)
{
	JsonbIterator *it = JsonbIteratorInit(&headers->root);
	JsonbIteratorToken token;
	JsonbValue	v;
	const char *name = NULL;
	int			len = 0;
	Size		encoded = 0;

	while ((token = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (token == WJB_KEY)
		{
			name = v.val.string.val;
			len = v.val.string.len;
			if (len == 0 || len > DEDUP_OUTBOX_MAX_HEADER_NAME_BYTES)
				publish_bad_header(name, len,
								   psprintf("Its name is %d bytes long.", len));
			if (publish_reserved_header(name, len))
				publish_bad_header(name, len,
								   "A broker routes by it, or the relay sets it.");
			/* a short string, a type octet */
			encoded += 1 + len + 1;
		}
		else if (token == WJB_VALUE)
		{
			switch (v.type)
			{
				case jbvString:
					encoded += 4 + v.val.string.len;
					break;
				case jbvBool:
					encoded += 1;
					break;
				case jbvNumeric:
					{
						char	   *digits = DatumGetCString(DirectFunctionCall1(numeric_out,
																				 NumericGetDatum(v.val.numeric)));
						char	   *end;

						errno = 0;
						(void) strtoi64(digits, &end, 10);
						if (errno != 0 || *end != '\0' || end == digits)
							publish_bad_header(name, len,
											   psprintf("Its value %s is not an integer of 64 bits.",
														digits));
						encoded += 8;
						break;
					}
				default:
					publish_bad_header(name, len,
									   v.type == jbvNull ? "Its value is null." :
									   "Its value is an array or an object.");
			}
		}
	}
	if (encoded > DEDUP_OUTBOX_MAX_HEADERS_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"headers\" of dedup_publish is too long"),
				 errdetail("Encoded for the broker it is %zu bytes; at most %d bytes are accepted.",
						   encoded, DEDUP_OUTBOX_MAX_HEADERS_BYTES),
				 errhint("Put what does not fit into the payload.")));
}

/* Prepare and keep a plan of sql, or raise SPI's error */
static SPIPlanPtr
publish_prepare(const char *sql, int nargs, Oid *argtypes)
{
	SPIPlanPtr	plan = SPI_prepare(sql, nargs, argtypes);

	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed for \"%s\": %s", sql,
			 SPI_result_code_string(SPI_result));
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "SPI_keepplan failed");
	return plan;
}

/*
 * The plans for the extension as it is now (called connected to SPI);
 * returns false when dedup's tables are not at version 1.4.
 */
static bool
publish_plans(const DedupRelations *rels)
{
	const char *nspname;
	StringInfoData sql;
	Oid			lookup_types[1] = {TEXTOID};
	Oid			insert_types[5] = {TEXTOID, TEXTOID, TEXTOID, JSONBOID, TEXTOID};

	if (plans.extension == rels->extension &&
		SearchSysCacheExists1(RELOID, ObjectIdGetDatum(plans.outbox)))
		return true;

	if (!plans_callbacks)
	{
		CacheRegisterSyscacheCallback(NAMESPACEOID, publish_plans_reset, (Datum) 0);
		CacheRegisterRelcacheCallback(publish_destinations_invalidate, (Datum) 0);
		destinations_context = AllocSetContextCreate(CacheMemoryContext,
													 "dedup outbox destinations",
													 ALLOCSET_SMALL_SIZES);
		plans_callbacks = true;
	}
	if (plans.lookup != NULL)
		SPI_freeplan(plans.lookup);
	if (plans.insert != NULL)
		SPI_freeplan(plans.insert);
	plans.lookup = plans.insert = NULL;
	plans.extension = InvalidOid;
	outbox_direct = OUTBOX_DIRECT_UNKNOWN;
	publish_destinations_reset();

	plans.outbox = dedup_member_table("dedup_outbox");
	plans.destinations = dedup_member_table("dedup_outbox_destinations");
	plans.publishers = dedup_member_table("dedup_outbox_publishers");
	plans.signing_key = dedup_member_table("dedup_outbox_signing_key");
	if (!OidIsValid(plans.outbox) || !OidIsValid(plans.destinations) ||
		!OidIsValid(plans.publishers))
		return false;
	nspname = quote_identifier(get_namespace_name(rels->schema));

	/* the key too, for a message in WAL mode; a table of 1.4 has none */
	initStringInfo(&sql);
	appendStringInfo(&sql,
					 "SELECT d.mode, ARRAY("
					 "SELECT p.publisher::pg_catalog.oid FROM %s.dedup_outbox_publishers p"
					 " WHERE p.destination OPERATOR(pg_catalog.=) d.destination), ",
					 nspname);
	if (OidIsValid(plans.signing_key))
		appendStringInfo(&sql,
						 "(SELECT k.key FROM %s.dedup_outbox_signing_key k)",
						 nspname);
	else
		appendStringInfoString(&sql, "NULL::pg_catalog.bytea");
	appendStringInfo(&sql,
					 " FROM %s.dedup_outbox_destinations d"
					 " WHERE d.destination OPERATOR(pg_catalog.=) $1",
					 nspname);
	plans.lookup = publish_prepare(sql.data, 1, lookup_types);

	resetStringInfo(&sql);
	appendStringInfo(&sql,
					 "INSERT INTO %s.dedup_outbox AS o"
					 " (message_id, destination, key, headers, payload)"
					 " VALUES ($1, $2, $3, $4, $5)"
					 " ON CONFLICT (message_id) DO NOTHING",
					 nspname);
	plans.insert = publish_prepare(sql.data, 5, insert_types);
	pfree(sql.data);
	plans.extension = rels->extension;
	return true;
}

/*
 * Refuse to write through a rule on dedup_outbox: one that rewrote the
 * INSERT into nothing would lose every message silently (and leave the
 * kept plan with nothing to depend on, so it stayed so after the rule was
 * dropped).  rel is open, locked as the INSERT locks it.
 */
static void
publish_check_rules(Relation rel)
{
	if (rel->rd_rules != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("table \"%s\" of extension \"dedup\" has rules",
						RelationGetRelationName(rel)),
				 errdetail("dedup_publish() does not write through rules: one could discard messages."),
				 errhint("Drop the rules of the table.")));
}

/*
 * Is the default expression adbin of column attnum of dedup_outbox the one
 * version 1.4 gives it: now() for created_at, 0 for attempts?
 */
static bool
publish_default_is(AttrNumber attnum, const char *adbin)
{
	Node	   *expr = stringToNode(adbin);

	if (attnum == OUTBOX_CREATED_AT)
		return IsA(expr, FuncExpr) && ((FuncExpr *) expr)->funcid == F_NOW;
	return attnum == OUTBOX_ATTEMPTS && IsA(expr, Const) &&
		((Const *) expr)->consttype == INT4OID &&
		!((Const *) expr)->constisnull &&
		DatumGetInt32(((Const *) expr)->constvalue) == 0;
}

/*
 * May dedup_outbox (rel, locked) be written directly, as the claims write
 * processed_messages (claim/claim_writer.c)?  Only when nothing on it would
 * act on the INSERT that the direct write would skip: no trigger, CHECK
 * constraint, row security or generated column, the columns of 1.4 with
 * their defaults (identity for seq, now() for created_at, 0 for attempts)
 * and their NOT NULLs (the direct write checks no constraint) and nothing
 * else, and message_id its primary key, not deferrable.
 * Otherwise dedup_publish writes through SPI, where all of that acts as
 * it says.  Decided once per change of the table; sets outbox_seq.
 */
static bool
publish_direct_possible(Relation rel)
{
	TupleDesc	desc = RelationGetDescr(rel);
	TupleConstr *constr = desc->constr;
	HeapTuple	tuple;
	Form_pg_index index;
	List	   *indexes;
	bool		key;

	if (outbox_direct != OUTBOX_DIRECT_UNKNOWN)
		return outbox_direct == OUTBOX_DIRECT_YES;
	outbox_direct = OUTBOX_DIRECT_NO;
	if (rel->trigdesc != NULL || rel->rd_rel->relrowsecurity ||
		desc->natts != OUTBOX_NATTS ||
		(constr != NULL && (constr->num_check > 0 || constr->has_generated_stored)))
		return false;
	for (int i = 0; i < OUTBOX_NATTS; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);
		AttrNumber	attnum = i + 1;

		if (att->attisdropped || att->attgenerated != '\0' ||
			att->atttypid != outbox_columns[i].type ||
			att->attnotnull != outbox_columns[i].notnull ||
			strcmp(NameStr(att->attname), outbox_columns[i].name) != 0 ||
			att->attidentity != (attnum == OUTBOX_SEQ ? ATTRIBUTE_IDENTITY_ALWAYS : '\0') ||
			att->atthasdef != (attnum == OUTBOX_CREATED_AT || attnum == OUTBOX_ATTEMPTS))
			return false;
	}
	for (int i = 0; constr != NULL && i < constr->num_defval; i++)
		if (!publish_default_is(constr->defval[i].adnum, constr->defval[i].adbin))
			return false;

	/* ON CONFLICT (message_id): its primary key, checked at once */
	indexes = RelationGetIndexList(rel);
	list_free(indexes);
	if (!OidIsValid(rel->rd_pkindex))
		return false;
	tuple = SearchSysCache1(INDEXRELID, ObjectIdGetDatum(rel->rd_pkindex));
	if (!HeapTupleIsValid(tuple))
		return false;
	index = (Form_pg_index) GETSTRUCT(tuple);
	key = index->indnkeyatts == 1 &&
		index->indkey.values[0] == OUTBOX_MESSAGE_ID &&
		index->indimmediate && index->indisvalid;
	ReleaseSysCache(tuple);
	if (!key)
		return false;

	outbox_seq = dedup_identity_sequence(rel, OUTBOX_SEQ);
	if (!OidIsValid(outbox_seq))
		return false;
	outbox_direct = OUTBOX_DIRECT_YES;
	return true;
}

/*
 * Write the message into dedup_outbox (rel, locked, as publish_direct_possible
 * allows) directly: what INSERT ... ON CONFLICT (message_id) DO NOTHING
 * with the columns' defaults writes, as the claims write processed_messages
 * (claim/claim_writer.c), without a plan or an executor.  Called as the
 * table's owner in a security-restricted operation: the sequence's
 * privileges are the owner's, and the expressions of an index a superuser
 * added run restricted.
 */
static void
publish_direct(Relation rel, const char *id, text *destination,
			   text *payload, text *key, Jsonb *headers)
{
	/* seq, message_id, destination, key, headers, payload, created_at */
	Datum		values[OUTBOX_ATTEMPTS] = {
		Int64GetDatum(nextval_internal(outbox_seq, true)),
		CStringGetTextDatum(id),
		PointerGetDatum(destination),
		PointerGetDatum(key),
		PointerGetDatum(headers),
		PointerGetDatum(payload),
		TimestampTzGetDatum(GetCurrentTransactionStartTimestamp())
	};

	/* lease_until and lease_holder NULL, attempts 0; sent_at NULL */
	bool		nulls[OUTBOX_ATTEMPTS] = {
		false, false, false, key == NULL, headers == NULL, false, false,
		true, true, false
	};
	ClaimWriter *writer;

	values[OUTBOX_ATTEMPTS - 1] = Int32GetDatum(0);

	writer = dedup_claim_writer_begin(rel, rel->rd_pkindex, 0, true);
	(void) dedup_claim_writer_insert_row(writer, values, nulls, OUTBOX_ATTEMPTS);
	dedup_claim_writer_end(writer);
}

/*
 * May user publish to destination, mapped to the nroles roles publishers?
 * When the destination is mapped, only members of one of them may; a role
 * that was dropped maps nothing.
 */
static void
publish_check_publisher(Oid user, text *destination, const Oid *publishers,
						int nroles)
{
	bool		mapped = false;

	for (int i = 0; i < nroles; i++)
	{
		if (!SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(publishers[i])))
			continue;
		if (has_privs_of_role(user, publishers[i]))
			return;
		mapped = true;
	}
	if (!mapped)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("role \"%s\" may not publish to destination \"%s\"",
					GetUserNameFromId(user, false), text_to_cstring(destination)),
			 errdetail("Only roles mapped to the destination in dedup_outbox_publishers may."),
			 errhint("A superuser can map the destination to a role with dedup_allow_publisher().")));
}

/*
 * Hold back a drop of any destination until this transaction ends, and
 * wait for one in progress: every publish, in either mode, holds the lock
 * a write of dedup_outbox takes, from before it checks its destination on;
 * dedup_drop_destination() takes one that conflicts with it
 * (dedup_outbox_drop_messages).  Its invalidations are read as the lock is
 * granted, so a publish that waited for a drop finds the destination gone,
 * and a drop that waited for a publish deletes its unsent message.
 */
static void
publish_hold_drops(void)
{
	LockRelationOid(plans.outbox, RowExclusiveLock);
}

/*
 * The destination from this backend's cache, if the plans are those of the
 * extension as it is now (rels) and the destination is there: then raises
 * the error if user may not publish to it, sets *wal to whether it is in
 * WAL mode and returns true.  Nothing is read: no SPI, no other role.
 */
static bool
publish_cached_destination(const DedupRelations *rels, Oid user,
						   text *destination, bool *wal)
{
	char		name[DEDUP_OUTBOX_MAX_NAME_BYTES + 1] = {0};
	Destination *entry;

	if (destinations == NULL || plans.extension != rels->extension ||
		!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(plans.outbox)))
		return false;
	/* a drop this waited for has emptied the cache (publish_hold_drops) */
	publish_hold_drops();
	if (destinations == NULL)
		return false;
	memcpy(name, VARDATA_ANY(destination), VARSIZE_ANY_EXHDR(destination));
	entry = hash_search(destinations, name, HASH_FIND, NULL);
	if (entry == NULL)
		return false;
	publish_check_publisher(user, destination, entry->publishers,
							entry->npublishers);
	*wal = entry->wal;
	return true;
}

/*
 * Keep the signing key read with a WAL-mode destination (value, NULL when
 * isnull), or raise the error of a key missing or damaged, or of tables
 * older than 1.5, which have none.
 */
static void
publish_read_signing_key(Datum value, bool isnull)
{
	bytea	   *key;

	if (!OidIsValid(plans.signing_key))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("dedup_publish() to a WAL-mode destination needs version 1.5 of extension \"dedup\""),
				 errdetail("Version 1.5 signs the messages of WAL mode, and the relay sends no other."),
				 errhint("Run ALTER EXTENSION dedup UPDATE.")));
	key = isnull ? NULL : DatumGetByteaPP(value);
	if (key == NULL || VARSIZE_ANY_EXHDR(key) != DEDUP_OUTBOX_SIGNING_KEY_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the signing key of dedup's outbox is missing"),
				 errdetail("Table dedup_outbox_signing_key must have one row, a key of %d bytes.",
						   DEDUP_OUTBOX_SIGNING_KEY_BYTES),
				 errhint("A superuser inserts one: INSERT INTO dedup_outbox_signing_key SELECT pg_catalog.sha256(pg_catalog.uuid_send(pg_catalog.gen_random_uuid()) OPERATOR(pg_catalog.||) pg_catalog.uuid_send(pg_catalog.gen_random_uuid()));")));
	memcpy(signing_key, VARDATA_ANY(key), DEDUP_OUTBOX_SIGNING_KEY_BYTES);
	signing_key_valid = true;
}

/*
 * The destination, read (connected to SPI, as the owner of the tables)
 * and kept in this backend's cache; raises its error if there is none, or
 * if user may not publish to it.  Read with a snapshot taken after both
 * tables are locked: every change that this snapshot cannot see has yet to
 * send its invalidation, which will empty the cache.  Returns whether it
 * is in WAL mode.
 */
static bool
publish_destination(Oid user, text *destination)
{
	char		name[DEDUP_OUTBOX_MAX_NAME_BYTES + 1] = {0};
	Destination *entry;
	Snapshot	snapshot;
	Datum		arg = PointerGetDatum(destination);
	Datum		publishers;
	bool		isnull;
	bool		wal;
	ArrayType  *array;
	Datum	   *roles;
	bool	   *nulls;
	int			nroles;
	Oid		   *oids;
	int			noids = 0;
	int			rc;

	memcpy(name, VARDATA_ANY(destination), VARSIZE_ANY_EXHDR(destination));
	publish_hold_drops();
	LockRelationOid(plans.destinations, AccessShareLock);
	LockRelationOid(plans.publishers, AccessShareLock);
	if (OidIsValid(plans.signing_key))
		LockRelationOid(plans.signing_key, AccessShareLock);
	snapshot = RegisterSnapshot(GetLatestSnapshot());
	rc = SPI_execute_snapshot(plans.lookup, &arg, NULL, snapshot,
							  InvalidSnapshot, true, false, 1);
	UnregisterSnapshot(snapshot);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "reading the destinations failed: %s",
			 SPI_result_code_string(rc));
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("destination \"%s\" does not exist",
						text_to_cstring(destination)),
				 errhint("A superuser adds it with dedup_add_destination().")));
	wal = strcmp(SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1),
				 "wal") == 0;
	publishers = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2,
							   &isnull);
	array = DatumGetArrayTypeP(publishers);
	deconstruct_array(array, OIDOID, sizeof(Oid), true, TYPALIGN_INT,
					  &roles, &nulls, &nroles);
	if (wal)
		publish_read_signing_key(SPI_getbinval(SPI_tuptable->vals[0],
											   SPI_tuptable->tupdesc, 3,
											   &isnull), isnull);

	if (destinations == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(entry->name);
		ctl.entrysize = sizeof(Destination);
		ctl.hcxt = destinations_context;
		destinations = hash_create("dedup outbox destinations", 16, &ctl,
								   HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	}
	oids = MemoryContextAlloc(destinations_context, Max(nroles, 1) * sizeof(Oid));
	for (int i = 0; i < nroles; i++)
		if (!nulls[i])
			oids[noids++] = DatumGetObjectId(roles[i]);
	entry = hash_search(destinations, name, HASH_ENTER, NULL);
	entry->wal = wal;
	entry->npublishers = noids;
	entry->publishers = oids;

	publish_check_publisher(user, destination, oids, noids);
	return wal;
}

/*
 * Put the signature line in front of a WAL-mode message's JSON (content):
 * "dedup-v1 ", the HMAC-SHA256 with the signing key of the top-level
 * transaction id in decimal, a newline and the JSON, in 64 hex digits, and
 * a newline.  The relay checks it, so that nothing but dedup_publish() can
 * write a message it sends: whoever may emit logical decoding messages can
 * neither read the key nor move a signed message into a transaction of
 * their own.
 */
static void
publish_sign(StringInfo content)
{
	static const char prefix[] = "dedup-v1 ";
	char		xid[16];
	uint8		mac[PG_SHA256_DIGEST_LENGTH];
	pg_hmac_ctx *ctx;
	StringInfoData signed_content;

	Assert(signing_key_valid);
	snprintf(xid, sizeof(xid), "%u\n", XidFromFullTransactionId(GetTopFullTransactionId()));
	ctx = pg_hmac_create(PG_SHA256);
	if (ctx == NULL ||
		pg_hmac_init(ctx, signing_key, sizeof(signing_key)) < 0 ||
		pg_hmac_update(ctx, (uint8 *) xid, strlen(xid)) < 0 ||
		pg_hmac_update(ctx, (uint8 *) content->data, content->len) < 0 ||
		pg_hmac_final(ctx, mac, sizeof(mac)) < 0)
		elog(ERROR, "could not sign a message: %s", pg_hmac_error(ctx));
	pg_hmac_free(ctx);

	initStringInfo(&signed_content);
	enlargeStringInfo(&signed_content,
					  sizeof(prefix) + 2 * sizeof(mac) + content->len + 1);
	appendStringInfoString(&signed_content, prefix);
	signed_content.len += hex_encode((char *) mac, sizeof(mac),
									 signed_content.data + signed_content.len);
	appendStringInfoChar(&signed_content, '\n');
	appendBinaryStringInfo(&signed_content, content->data, content->len);
	pfree(content->data);
	*content = signed_content;
}

/*
 * Write the message as a transactional logical decoding message, prefix
 * "dedup", content the JSON object of the file header.
 */
static void
publish_wal(const char *id, text *destination, text *payload, text *key,
			Jsonb *headers)
{
	StringInfoData content;

	if (!XLogLogicalInfoActive())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("dedup_publish() to destination \"%s\" needs wal_level logical",
						text_to_cstring(destination)),
				 errdetail("The destination is in WAL mode; wal_level is \"%s\".",
						   GetConfigOption("wal_level", false, false)),
				 errhint("Set wal_level = logical and restart the server, or put the destination in table mode with dedup_add_destination(destination, 'table').")));

	initStringInfo(&content);
	enlargeStringInfo(&content, VARSIZE_ANY_EXHDR(payload) +
					  (key != NULL ? VARSIZE_ANY_EXHDR(key) : 0) +
					  (headers != NULL ? VARSIZE(headers) : 0) +
					  VARSIZE_ANY_EXHDR(destination) + 128);
	appendStringInfoString(&content, "{\"id\": ");
	escape_json(&content, id);
	appendStringInfoString(&content, ", \"destination\": ");
	escape_json(&content, text_to_cstring(destination));
	appendStringInfoString(&content, ", \"key\": ");
	if (key != NULL)
		escape_json(&content, text_to_cstring(key));
	else
		appendStringInfoString(&content, "null");
	appendStringInfoString(&content, ", \"headers\": ");
	if (headers != NULL)
		(void) JsonbToCString(&content, &headers->root, VARSIZE(headers));
	else
		appendStringInfoString(&content, "null");
	appendStringInfoString(&content, ", \"payload\": ");
	escape_json(&content, text_to_cstring(payload));
	appendStringInfoChar(&content, '}');

	publish_sign(&content);
	(void) dedup_log_logical_message("dedup", content.data, content.len, true);
	pfree(content.data);
}

/*
 * Connect to SPI with the plans of the extension as it is now (rels); the
 * caller finishes.  Raises the error of an extension whose tables are
 * older than 1.4.
 */
static void
publish_connect(const DedupRelations *rels)
{
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (!publish_plans(rels))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("dedup_publish() needs version 1.4 of extension \"dedup\""),
				 errhint("Run ALTER EXTENSION dedup UPDATE.")));
}

/* Run as the owner of dedup_outbox in a security-restricted operation */
static void
publish_as_owner(int sec_context)
{
	SetUserIdAndSecContext(dedup_table_owner(plans.outbox),
						   sec_context | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
}

/*
 * dedup_publish(destination text, payload text, key text DEFAULT NULL,
 * headers jsonb DEFAULT NULL) RETURNS text
 *
 * Publish a message in the caller's transaction; returns its id (origin.c).
 * Every argument is checked before anything is written.
 */
Datum
dedup_publish(PG_FUNCTION_ARGS)
{
	const DedupRelations *rels;
	text	   *destination;
	text	   *payload;
	text	   *key = NULL;
	Jsonb	   *headers = NULL;
	Oid			save_userid;
	int			save_sec_context;
	Relation	rel;
	Datum		args[5];
	char		nulls[5] = {' ', ' ', ' ', ' ', ' '};
	char		id[DEDUP_OUTBOX_ID_LEN + 1];
	bool		wal = false;
	int			rc;

	dedup_outbox_check_name("dedup_publish", "destination", PG_GETARG_DATUM(0),
							PG_ARGISNULL(0), DEDUP_OUTBOX_MAX_NAME_BYTES);
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"payload\" of dedup_publish must not be null")));
	publish_check_size("payload", PG_GETARG_DATUM(1));
	if (!PG_ARGISNULL(2))
	{
		dedup_outbox_check_name("dedup_publish", "key", PG_GETARG_DATUM(2),
								false, DEDUP_OUTBOX_MAX_KEY_BYTES);
		key = PG_GETARG_TEXT_PP(2);
	}
	if (!PG_ARGISNULL(3))
	{
		publish_check_size("headers", PG_GETARG_DATUM(3));
		headers = PG_GETARG_JSONB_P(3);
		if (JB_ROOT_IS_SCALAR(headers) || !JB_ROOT_IS_OBJECT(headers))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("argument \"headers\" of dedup_publish must be a JSON object")));
		publish_check_headers(headers);
	}
	destination = PG_GETARG_TEXT_PP(0);
	payload = PG_GETARG_TEXT_PP(1);

	PreventCommandDuringRecovery("dedup_publish()");
	PreventCommandIfReadOnly("dedup_publish()");
	rels = dedup_relations(false);

	/*
	 * A destination this backend has read already needs neither SPI nor the
	 * owner's identity: a WAL-mode message then runs no other role's code at
	 * all.
	 */
	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	if (!publish_cached_destination(rels, save_userid, destination, &wal))
	{
		publish_connect(rels);
		publish_as_owner(save_sec_context);
		wal = publish_destination(save_userid, destination);
		SetUserIdAndSecContext(save_userid, save_sec_context);
		SPI_finish();
	}

	dedup_outbox_next_id(VARDATA_ANY(destination),
						 VARSIZE_ANY_EXHDR(destination), id);
	if (wal)
		publish_wal(id, destination, payload, key, headers);
	else
	{
		publish_as_owner(save_sec_context);
		rel = table_open(plans.outbox, RowExclusiveLock);
		publish_check_rules(rel);
		if (publish_direct_possible(rel))
		{
			publish_direct(rel, id, destination, payload, key, headers);
			table_close(rel, NoLock);
			SetUserIdAndSecContext(save_userid, save_sec_context);
			PG_RETURN_TEXT_P(cstring_to_text(id));
		}
		table_close(rel, NoLock);
		publish_connect(rels);
		args[0] = CStringGetTextDatum(id);
		args[1] = PointerGetDatum(destination);
		args[2] = PointerGetDatum(key);
		nulls[2] = key == NULL ? 'n' : ' ';
		args[3] = PointerGetDatum(headers);
		nulls[3] = headers == NULL ? 'n' : ' ';
		args[4] = PointerGetDatum(payload);
		rc = SPI_execute_plan(plans.insert, args, nulls, false, 0);
		if (rc != SPI_OK_INSERT)
			elog(ERROR, "writing the outbox failed: %s",
				 SPI_result_code_string(rc));
		SetUserIdAndSecContext(save_userid, save_sec_context);
		SPI_finish();
	}

	PG_RETURN_TEXT_P(cstring_to_text(id));
}

/*
 * dedup_outbox_valid(value text, argument text, function_name text)
 * RETURNS text
 *
 * value, or the error a caller of function_name must see: the check of a
 * destination or relay name in the outbox's SQL functions.
 */
Datum
dedup_outbox_valid(PG_FUNCTION_ARGS)
{
	const char *argument = PG_ARGISNULL(1) ? "value" :
	text_to_cstring(PG_GETARG_TEXT_PP(1));
	const char *function = PG_ARGISNULL(2) ? "dedup" :
	text_to_cstring(PG_GETARG_TEXT_PP(2));

	dedup_outbox_check_name(function, argument, PG_GETARG_DATUM(0),
							PG_ARGISNULL(0), DEDUP_OUTBOX_MAX_NAME_BYTES);
	PG_RETURN_DATUM(PG_GETARG_DATUM(0));
}

/*
 * dedup_outbox_valid_lease(relay text, max_messages integer, lease
 * interval) RETURNS boolean
 *
 * true, or the error a caller of dedup_outbox_lease must see: a relay name
 * as dedup_outbox_valid() wants it, 1 to 10000 messages, a lease longer
 * than 0 and at most a day.
 */
Datum
dedup_outbox_valid_lease(PG_FUNCTION_ARGS)
{
	Interval   *lease;
	int64		usecs;

	dedup_outbox_check_name("dedup_outbox_lease", "relay", PG_GETARG_DATUM(0),
							PG_ARGISNULL(0), DEDUP_OUTBOX_MAX_NAME_BYTES);
	if (PG_ARGISNULL(1) || PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"%s\" of dedup_outbox_lease must not be null",
						PG_ARGISNULL(1) ? "max_messages" : "lease")));
	if (PG_GETARG_INT32(1) < 1 || PG_GETARG_INT32(1) > DEDUP_MAX_BATCH_KEYS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"max_messages\" of dedup_outbox_lease must be between 1 and %d, not %d",
						DEDUP_MAX_BATCH_KEYS, PG_GETARG_INT32(1))));
	lease = PG_GETARG_INTERVAL_P(2);
	usecs = lease->time + (int64) lease->day * USECS_PER_DAY;
	if (lease->month != 0 || lease->day < 0 || lease->time < 0 ||
		usecs <= 0 || usecs > MAX_LEASE_USECS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"lease\" of dedup_outbox_lease must be longer than 0 and at most 1 day")));
	PG_RETURN_BOOL(true);
}

/*
 * dedup_outbox_drop_messages(destination text, force boolean) RETURNS bigint
 *
 * The first step of dedup_drop_destination(): deletes the destination's
 * unsent messages and returns how many, or refuses to when there are any
 * and not force.  It first waits for every transaction that is publishing
 * and holds new ones back until this transaction ends
 * (publish_hold_drops), so that it sees every message published to the
 * destination, and none commits after the drop.  The lock conflicts with
 * itself: two drops wait for each other, and neither holds a lock on
 * dedup_outbox before it (which is why this is not a statement of the SQL
 * function, planned with its lock before the function runs).  Refused in
 * a transaction with a single snapshot, which would not see what was
 * published while it waited.
 */
Datum
dedup_outbox_drop_messages(PG_FUNCTION_ARGS)
{
	const DedupRelations *rels;
	Oid			outbox;
	Datum		arg;
	StringInfoData sql;
	Oid			argtypes[1] = {TEXTOID};
	int64		unsent;
	bool		isnull;
	int			rc;

	dedup_outbox_check_name("dedup_drop_destination", "destination",
							PG_GETARG_DATUM(0), PG_ARGISNULL(0),
							DEDUP_OUTBOX_MAX_NAME_BYTES);
	arg = PG_GETARG_DATUM(0);
	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TRANSACTION_STATE),
				 errmsg("dedup_drop_destination() cannot run in a transaction at isolation level %s",
						IsolationIsSerializable() ? "SERIALIZABLE" : "REPEATABLE READ"),
				 errdetail("Its snapshot would not see the messages published while it waits for their transactions."),
				 errhint("Run it at isolation level READ COMMITTED.")));
	rels = dedup_relations(false);
	outbox = dedup_member_table("dedup_outbox");
	if (!OidIsValid(outbox))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("dedup_drop_destination() needs version 1.4 of extension \"dedup\""),
				 errhint("Run ALTER EXTENSION dedup UPDATE.")));
	LockRelationOid(outbox, ShareRowExclusiveLock);

	initStringInfo(&sql);
	appendStringInfo(&sql,
					 "WITH deleted AS (DELETE FROM %s.dedup_outbox o"
					 " WHERE o.destination OPERATOR(pg_catalog.=) $1"
					 " AND o.sent_at IS NULL RETURNING 1)"
					 " SELECT pg_catalog.count(*) FROM deleted",
					 quote_identifier(get_namespace_name(rels->schema)));
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	rc = SPI_execute_with_args(sql.data, 1, argtypes, &arg, NULL, false, 1);
	if (rc != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "deleting the unsent messages failed: %s",
			 SPI_result_code_string(rc));
	unsent = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
										 SPI_tuptable->tupdesc, 1, &isnull));
	SPI_finish();
	pfree(sql.data);

	if (unsent > 0 && (PG_ARGISNULL(1) || !PG_GETARG_BOOL(1)))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("destination \"%s\" has %lld unsent messages",
						TextDatumGetCString(arg), (long long) unsent),
				 errhint("Let a relay send them first, or delete them unsent with dedup_drop_destination(destination, force => true).")));
	PG_RETURN_INT64(unsent);
}
