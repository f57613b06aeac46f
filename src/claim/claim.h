/*-------------------------------------------------------------------------
 *
 * claim.h
 *	  The argument checks of the claims (claim.c), which the other entry
 *	  points that take a consumer and a key (a message id, a stream) share.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEDUP_CLAIM_H
#define DEDUP_CLAIM_H

extern void dedup_check_not_null(const char *function, const char *argname,
								 int element, bool isnull);
extern void dedup_check_key(const char *function, const char *argname,
							int element, Datum value, bool isnull,
							Size max_bytes);

#endif							/* DEDUP_CLAIM_H */
