/*-------------------------------------------------------------------------
 *
 * origin.c
 *	  The ids of published messages.  The claim path (claim.c) tells this
 *	  file of every claim that answered true; dedup_publish() asks it for
 *	  the id of each message it publishes.
 *
 * While the transaction's most recent successful claim is alive -- made in
 * this transaction, and not rolled back to a savepoint -- every message
 * published has an id derived from it: after a claim of one message id
 * (dedup_claim, dedup_try_claim, dedup_claim_many of one), the first 16
 * bytes of
 *
 *	 SHA-256("dedup-outbox-v1" || 0x00 || part(consumer) ||
 *			 part(incoming message id) || part(destination) || be32(ordinal))
 *
 * and after a claim of one offset (dedup_claim_offset, dedup_claim_offsets
 * of one), the first 16 bytes of
 *
 *	 SHA-256("dedup-outbox-offset-v1" || 0x00 || part(consumer) ||
 *			 part(stream) || be32(partition) || be64(offset) ||
 *			 part(destination) || be32(ordinal))
 *
 * where part(s) is be32(octet length of s) || the bytes of s (in the
 * database encoding), be32 and be64 big-endian integers of 32 and 64 bits
 * and ordinal the place of this publish since that claim (1, 2, ...: every
 * dedup_publish() call, whatever its destination, including those rolled
 * back to a savepoint since), formatted as a UUID of version 8 (RFC 9562:
 * the version nibble 8, the variant bits 10).  The two tags keep an offset
 * from ever deriving the ids of a message id.  Handling the same incoming
 * message again (after it was forgotten, or rolled back, or replayed from
 * an offset) publishing the same messages in the same order yields the
 * same ids, and the next hop's dedup_claim() skips what it has processed.
 * A claim of a batch (of more than one message id or offset) or a routed
 * claim has no single incoming message: after it, as without any claim,
 * ids are random (version 4).
 *
 * What is remembered lives in TopTransactionContext and is forgotten at the
 * end of the transaction, and when the subtransaction of the claim (or one
 * around it) aborts: the transaction and subtransaction callbacks below,
 * registered at the first claim.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "common/cryptohash.h"
#include "common/sha2.h"
#include "port/pg_bswap.h"
#include "utils/memutils.h"

#include "compat.h"				/* keep: varatt.h on 16 and later */
#include "outbox/outbox.h"

/* the claim the ids are derived from */
typedef struct OutboxOrigin
{
	bool		valid;
	bool		offset;			/* a claim of one offset, not a message id */
	SubTransactionId subid;		/* where the claim was made */
	char	   *consumer;		/* in TopTransactionContext */
	uint32		consumer_len;
	char	   *incoming;		/* the message id, or the stream */
	uint32		incoming_len;
	int32		partition;		/* a claim of one offset: where it was */
	int64		position;
	uint32		ordinal;		/* publishes since the claim */
} OutboxOrigin;

static OutboxOrigin origin;
static bool origin_callbacks = false;

/* The end of the transaction forgets the claim (its memory goes with it). */
static void
origin_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			origin.valid = false;
			break;
		default:
			break;
	}
}

/*
 * A subtransaction that aborts takes a claim made in it, or in one started
 * inside it, with it: those have IDs at least its own.
 */
static void
origin_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						SubTransactionId parentSubid, void *arg)
{
	if (event == SUBXACT_EVENT_ABORT_SUB && origin.valid &&
		origin.subid >= mySubid)
		origin.valid = false;
}

/* A copy of t's bytes in TopTransactionContext, its length at *len */
static char *
origin_copy(text *t, uint32 *len)
{
	char	   *copy;

	*len = VARSIZE_ANY_EXHDR(t);
	copy = MemoryContextAlloc(TopTransactionContext, Max(*len, 1));
	memcpy(copy, VARDATA_ANY(t), *len);
	return copy;
}

/*
 * A claim answered true: the messages published from now on derive their
 * ids from it, or are random again if it has no single incoming message.
 */
void
dedup_outbox_note_claim(const DedupClaimOrigin *claim)
{
	if (!origin_callbacks)
	{
		RegisterXactCallback(origin_xact_callback, NULL);
		RegisterSubXactCallback(origin_subxact_callback, NULL);
		origin_callbacks = true;
	}
	if (origin.valid)
	{
		pfree(origin.consumer);
		pfree(origin.incoming);
		origin.valid = false;
	}
	if (claim->message_id == NULL && claim->stream == NULL)
		return;

	origin.consumer = origin_copy(claim->consumer, &origin.consumer_len);
	origin.offset = claim->message_id == NULL;
	origin.incoming = origin_copy(origin.offset ? claim->stream :
								  claim->message_id, &origin.incoming_len);
	origin.partition = claim->partition;
	origin.position = claim->offset;
	origin.subid = GetCurrentSubTransactionId();
	origin.ordinal = 0;
	origin.valid = true;
}

/* Feed bytes to the hash, or raise its error */
static void
origin_hash(pg_cryptohash_ctx *ctx, const void *data, size_t len)
{
	if (pg_cryptohash_update(ctx, data, len) < 0)
		elog(ERROR, "could not compute a message id: %s",
			 pg_cryptohash_error(ctx));
}

/* Feed one part, its length (32 bits, big-endian) then its bytes */
static void
origin_hash_part(pg_cryptohash_ctx *ctx, const char *data, uint32 len)
{
	uint32		be = pg_hton32(len);

	origin_hash(ctx, &be, sizeof(be));
	origin_hash(ctx, data, len);
}

/* bytes[0..15] as a UUID's text, with its version; 37 bytes at id */
static void
origin_format(uint8 *bytes, int version, char *id)
{
	static const char hex[] = "0123456789abcdef";
	char	   *p = id;

	bytes[6] = (bytes[6] & 0x0f) | (version << 4);
	bytes[8] = (bytes[8] & 0x3f) | 0x80;
	for (int i = 0; i < 16; i++)
	{
		if (i == 4 || i == 6 || i == 8 || i == 10)
			*p++ = '-';
		*p++ = hex[bytes[i] >> 4];
		*p++ = hex[bytes[i] & 0x0f];
	}
	*p = '\0';
}

/*
 * The id of the next message published to destination (destination_len
 * bytes), written at id (DEDUP_OUTBOX_ID_LEN + 1 bytes): derived from the
 * transaction's live claim if there is one, else random.
 */
void
dedup_outbox_next_id(const char *destination, int destination_len, char *id)
{
	static const char message_tag[] = "dedup-outbox-v1";
	static const char offset_tag[] = "dedup-outbox-offset-v1";
	uint8		digest[PG_SHA256_DIGEST_LENGTH];
	pg_cryptohash_ctx *ctx;
	uint32		be;

	if (!origin.valid)
	{
		if (!pg_strong_random(digest, 16))
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("could not generate a random message id")));
		origin_format(digest, 4, id);
		return;
	}

	origin.ordinal++;
	ctx = pg_cryptohash_create(PG_SHA256);
	if (ctx == NULL || pg_cryptohash_init(ctx) < 0)
		elog(ERROR, "could not compute a message id: %s",
			 pg_cryptohash_error(ctx));
	/* each tag with its terminating zero */
	if (origin.offset)
		origin_hash(ctx, offset_tag, sizeof(offset_tag));
	else
		origin_hash(ctx, message_tag, sizeof(message_tag));
	origin_hash_part(ctx, origin.consumer, origin.consumer_len);
	origin_hash_part(ctx, origin.incoming, origin.incoming_len);
	if (origin.offset)
	{
		uint64		be64 = pg_hton64((uint64) origin.position);

		be = pg_hton32((uint32) origin.partition);
		origin_hash(ctx, &be, sizeof(be));
		origin_hash(ctx, &be64, sizeof(be64));
	}
	origin_hash_part(ctx, destination, destination_len);
	be = pg_hton32(origin.ordinal);
	origin_hash(ctx, &be, sizeof(be));
	if (pg_cryptohash_final(ctx, digest, sizeof(digest)) < 0)
		elog(ERROR, "could not compute a message id: %s",
			 pg_cryptohash_error(ctx));
	pg_cryptohash_free(ctx);
	origin_format(digest, 8, id);
}
